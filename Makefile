# The two commands a newcomer types (see README.md). Each sets up .venv first if needed.
.PHONY: setup run test test-unit bench sample

setup:
	@bash scripts/setup.sh

run: setup
	@mkdir -p out
	.venv/bin/python -m pipeline run datasets/sample.parquet out/sample-answers.parquet

test: setup
	.venv/bin/python -m pytest -q

test-unit: setup
	.venv/bin/python -m pytest -q tests/unit

sample: setup
	.venv/bin/python datasets/generate.py
