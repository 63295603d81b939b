# The two commands a newcomer types (see README.md). Each sets up .venv first if needed.
.PHONY: setup run test test-unit lint typecheck sample

setup:
	@bash scripts/setup.sh

run: setup
	@mkdir -p out
	.venv/bin/python -m pipeline run datasets/sample.parquet out/sample-answers.parquet

# pytest exits 5 when it collects no tests: the suite always has tests, so that is a failure.
test: setup
	@.venv/bin/python -m pytest -q; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

# ruff's lint rules (pyproject.toml, [tool.ruff]): pycodestyle, pyflakes, sorted imports, lines <= 120;
# and ruff's formatter, which must leave every file as it is (`.venv/bin/ruff format .` formats them).
lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

# mypy over pipeline/ and tasks/, every module (pyproject.toml, [tool.mypy]).
typecheck: setup
	.venv/bin/mypy

test-unit: setup
	.venv/bin/python -m pytest -q tests/unit

sample: setup
	.venv/bin/python datasets/generate.py
