"""The docs against the code: commands, options and config keys that README.md and docs/*.md
name must exist, the configuration reference must name every key, and every YAML config example
must validate. Fast: no cluster, no engine."""

from __future__ import annotations

import re
import typing
import warnings
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from pipeline.cli.main import _parser
from pipeline.config import Config, ConfigNote, parse_config

ROOT = Path(__file__).resolve().parents[2]
GENERATED: set[str] = set()  # (docs/BENCHMARKS.md is written by hand but for the bench's own section)
DOCS = [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in GENERATED)
NOT_A_CONFIG = "# not a config"

# Names of things this version no longer has (the client-side feed and its knobs). A page that
# names one describes something a user cannot do.
REMOVED = [
    r"jobs\.path",
    r"--job-path",
    r"router-bench",
    r"--experiments",
    r"\brouter\b",
    r"late[ _]binding",
    r"\bdispatcher\b",
    r"in-order buffer",
    r"codec\.py",
    r"store_output",
    r"static_assignment",
    r"Pipeline\.transfer",
    r"prefix_units",
    r"decode_weight",
    r"min_match",
    r"imbalance_(abs|ratio)",
    r"queue_per_shard",
    r"fast_batch_s",
    r"prefix_cache_entries",
    r"compression_level",
    r"routing\.block_size",
    r"intake\.batch_size",
]


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# -- the config model ---------------------------------------------------------------------------
def _model_of(annotation) -> type[BaseModel] | None:
    """The config section class behind a field's annotation (``list[ShardConfig]`` included)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) is list:
        (inner,) = typing.get_args(annotation)
        return _model_of(inner)
    return None


def _is_list(annotation) -> bool:
    return typing.get_origin(annotation) is list


def _sections(model: type[BaseModel] = Config, path: str = "") -> dict[str, type[BaseModel]]:
    """Every section by its dotted path: ``engine``, ``shards``, ``advanced``, ``advanced.intake``."""
    found = {}
    for name, field in model.model_fields.items():
        section = _model_of(field.annotation)
        if section is not None:
            found[path + name] = section
            found.update(_sections(section, f"{path}{name}."))
    return found


SECTIONS = _sections()
LIST_SECTIONS = {name for name, f in Config.model_fields.items() if _is_list(f.annotation)}


def _leaf_keys(model: type[BaseModel] = Config, prefix: str = "") -> list[str]:
    """Every key a config file can set: ``engine.max_num_seqs``, ``shards[].devices``, ``task``,
    ``advanced.intake.max_in_flight``."""
    keys = []
    for name, field in model.model_fields.items():
        section = _model_of(field.annotation)
        if section is None:
            keys.append(prefix + name)
        else:
            keys += _leaf_keys(section, f"{prefix}{name}[]." if _is_list(field.annotation) else f"{prefix}{name}.")
    return keys


LEAF_KEYS = _leaf_keys()
# The tuning sections' place before `advanced:` (still read, with a note): a page naming
# `intake.max_in_flight` names a key by a path the reference no longer has.
OLD_SECTIONS = {
    name.removeprefix("advanced."): name for name in SECTIONS if name.count(".") == 1 and name.startswith("advanced.")
}
# A section's path, a dot (or "[]." for a list of sections), a key; not part of a longer dotted
# name or a path (pipeline/worker/engine.py, distributed.scheduler.allowed-failures).
DOTTED = re.compile(
    r"(?<![\w./\-\[])("
    + "|".join(re.escape(name) for name in sorted([*SECTIONS, *OLD_SECTIONS], key=len, reverse=True))
    + r")(\[\])?\.([A-Za-z_][A-Za-z0-9_]*)(?![\w\-])"
)


def _dotted_keys(text: str):
    for m in DOTTED.finditer(text):
        section, listed, key = m.groups()
        if key == "py" or (section in LIST_SECTIONS) != bool(listed):
            continue  # a file name; a shard by its name (`shards.big: ...` in an error message)
        yield m.group(0), section, key


def _not_a_key(name: str, section: str, key: str) -> str | None:
    """Why a dotted name a page gives is not a config key (None: it is one)."""
    if section in OLD_SECTIONS:
        return f"{name} (now {OLD_SECTIONS[section]}.{key})"
    return None if key in SECTIONS[section].model_fields else name


def test_config_model_walk_finds_known_keys():
    # The walk itself: if these are not found, the checks below check nothing.
    for key in (
        "engine.max_num_seqs",
        "advanced.intake.read_ahead_rows",
        "shards[].devices",
        "advanced.routing.max_blocks",
        "advanced.jobs.worker_memory",
        "storage_options",
        "task",
    ):
        assert key in LEAF_KEYS
    assert "jobs.path" not in LEAF_KEYS and "advanced.jobs.path" not in LEAF_KEYS
    assert "intake.read_ahead_rows" not in LEAF_KEYS and "advanced" not in LEAF_KEYS
    assert set(OLD_SECTIONS) == {"intake", "routing", "recovery", "jobs"}


@pytest.mark.parametrize("path", DOCS, ids=_rel)
def test_dotted_config_keys_exist(path):
    bad = sorted({why for found in _dotted_keys(_text(path)) if (why := _not_a_key(*found))})
    assert not bad, (
        f"{_rel(path)} names config keys the model (pipeline/config/config_file.py) lacks, or by "
        f"their old place: {', '.join(bad)}"
    )


def test_dotted_key_check_catches_a_removed_key():
    found = list(_dotted_keys("set `advanced.routing.late_binding: false` or `advanced.intake.max_in_flightx`"))
    assert [(s, k) for _, s, k in found] == [
        ("advanced.routing", "late_binding"),
        ("advanced.intake", "max_in_flightx"),
    ]
    assert [_not_a_key(*f) for f in found] == ["advanced.routing.late_binding", "advanced.intake.max_in_flightx"]
    assert _not_a_key(*next(_dotted_keys("`advanced.intake.max_in_flight`"))) is None
    assert _not_a_key(*next(_dotted_keys("`advanced.intake`"))) is None
    assert _not_a_key(*next(_dotted_keys("`advanced.intakes`"))) == "advanced.intakes"
    # the old place of a tuning key (read from an old file, but not the name to give)
    assert [_not_a_key(*f) for f in _dotted_keys("`intake.max_in_flight` and `jobs.bucket_rows`")] == [
        "intake.max_in_flight (now advanced.intake.max_in_flight)",
        "jobs.bucket_rows (now advanced.jobs.bucket_rows)",
    ]
    assert list(_dotted_keys("see pipeline/worker/engine.py and distributed.scheduler.allowed-failures")) == []
    assert list(_dotted_keys("pipeline/jobs/cluster_job.py, pipeline.jobs.command, the client's recovery.py")) == []


def _reference_keys(text: str) -> set[str]:
    """The keys the reference's tables give, by their full paths (a table row's first cell)."""
    return set(re.findall(r"^\| `([A-Za-z_][\w\[\].]*)` \|", text, re.M))


def test_configuration_reference_names_every_key():
    named = _reference_keys(_text(ROOT / "docs" / "configuration.md"))
    missing = [key for key in LEAF_KEYS if key not in named]
    assert not missing, f"docs/configuration.md's tables do not give these config keys: {', '.join(missing)}"
    unknown = sorted(named - set(LEAF_KEYS) - {"shards"})  # (`shards`: auto, or a list of the shards[] keys)
    assert not unknown, f"docs/configuration.md's tables give keys the model lacks: {', '.join(unknown)}"


def test_reference_check_wants_full_paths():
    assert _reference_keys("| `advanced.intake.max_in_flight` | `96` | ... |\n| `intake.kv_budget_share` | x |") == {
        "advanced.intake.max_in_flight",
        "intake.kv_budget_share",
    }
    assert "advanced.intake.kv_budget_share" in LEAF_KEYS and "intake.kv_budget_share" not in LEAF_KEYS


@pytest.mark.parametrize("path", DOCS, ids=_rel)
def test_no_removed_names(path):
    text = _text(path)
    found = [pattern for pattern in REMOVED if re.search(pattern, text)]
    assert not found, f"{_rel(path)} names what no longer exists: {', '.join(found)}"


# -- commands and options -------------------------------------------------------------------------
def _subcommands() -> dict:
    parser = _parser()
    return parser._subparsers._group_actions[0].choices


COMMAND = re.compile(r"python -m pipeline\s+([A-Za-z][\w-]*)(.*)")


def _command_lines(text: str):
    """Each line (a ``\\`` continuation joined to the next) naming ``python -m pipeline CMD``:
    the command and what follows it up to the end of its inline code span or line."""
    lines = text.splitlines()
    joined, buf = [], ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        joined.append(buf + line)
        buf = ""
    if buf:
        joined.append(buf)
    for line in joined:
        for part in line.split("python -m pipeline")[1:]:
            m = COMMAND.match("python -m pipeline" + part)
            if m is None:
                continue
            command, rest = m.groups()
            rest = rest.split("`")[0]
            yield command, re.findall(r"(?<![\w-])(--[A-Za-z][\w-]*)", rest)


def test_documented_commands_exist():
    commands = _subcommands()
    problems, seen = [], 0
    for path in DOCS:
        for command, options in _command_lines(_text(path)):
            seen += 1
            if command not in commands:
                problems.append(f"{_rel(path)}: python -m pipeline {command}: no such command")
                continue
            accepted = commands[command]._option_string_actions
            problems += [
                f"{_rel(path)}: python -m pipeline {command} {option}: no such option"
                for option in options
                if option not in accepted
            ]
    assert seen > 10, "found too few commands: the pattern is broken"
    assert not problems, "\n".join(problems)


def test_command_check_catches_a_removed_option():
    commands = _subcommands()
    found = list(_command_lines("`python -m pipeline run a b --job-path client` and `python -m pipeline router-bench`"))
    assert found == [("run", ["--job-path"]), ("router-bench", [])]
    assert "--job-path" not in commands["run"]._option_string_actions
    assert "router-bench" not in commands


def _synopsis(text: str) -> dict[str, str]:
    """usage.md's synopsis (its first ``bash`` block): each command's entry, its continuation
    lines joined, its trailing comment dropped."""
    block = re.search(r"^```bash\n(.*?)^```", text, re.S | re.M).group(1)
    entries: dict[str, str] = {}
    command = None
    for line in block.splitlines():
        line = line.split("  #")[0]
        m = re.match(r"\.venv/bin/python -m pipeline ([\w-]+)(.*)", line)
        if m:
            command = m.group(1)
            entries[command] = m.group(2)
        elif command is not None:
            entries[command] += " " + line.strip()
    return entries


def _documented_options(entry: str) -> dict[str, set[str] | None]:
    """An entry's options, each with the choices it lists (``--format auto|parquet|openai``) or None."""
    found = {}
    for m in re.finditer(r"(?<![\w-])(--[A-Za-z][\w-]*)(?: ([a-z_]+(?:\|[a-z_]+)+)(?=[\] ]|$))?", entry):
        found[m.group(1)] = set(m.group(2).split("|")) if m.group(2) else None
    return found


def test_usage_synopsis_is_the_parsers():
    """Every command, option and choice of the parser is in usage.md's synopsis, and nothing else."""
    commands = _subcommands()
    synopsis = _synopsis(_text(ROOT / "docs" / "usage.md"))
    assert set(synopsis) == set(commands)
    problems = []
    for command, entry in synopsis.items():
        actions = {
            max(a.option_strings, key=len): a
            for a in commands[command]._actions
            if a.option_strings and "--help" not in a.option_strings
        }
        documented = _documented_options(entry)
        problems += [f"{command} {o}: not in the synopsis" for o in set(actions) - set(documented)]
        problems += [f"{command} {o}: not an option" for o in set(documented) - set(actions)]
        for option, choices in documented.items():
            action = actions.get(option)
            if action is not None and action.choices is not None and choices != set(action.choices):
                problems.append(
                    f"{command} {option}: the synopsis lists {sorted(choices or ())}, the parser "
                    f"{sorted(action.choices)}"
                )
        positionals = [a.dest.upper() for a in commands[command]._actions if not a.option_strings]
        problems += [
            f"{command} {name}: not in the synopsis" for name in positionals if not re.search(rf"\b{name}\b", entry)
        ]
    assert not problems, "\n".join(problems)


def test_synopsis_check_catches_a_missing_choice():
    entry = _synopsis(
        "```bash\n.venv/bin/python -m pipeline run INPUT OUTPUT [--task a|b] [--quiet]\n"
        "    [--max-tokens N]   # a comment --not-an-option\n```\n"
    )["run"]
    assert _documented_options(entry) == {"--task": {"a", "b"}, "--quiet": None, "--max-tokens": None}


# -- YAML examples --------------------------------------------------------------------------------
def _yaml_blocks(text: str):
    for m in re.finditer(r"^```ya?ml[^\n]*\n(.*?)^```", text, re.S | re.M):
        yield m.group(1)


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


YAML_BLOCKS = [(path, i, block) for path in DOCS for i, block in enumerate(_yaml_blocks(_text(path)))]


def test_yaml_blocks_found():
    assert len(YAML_BLOCKS) >= 3


@pytest.mark.parametrize("path,index,block", YAML_BLOCKS, ids=[f"{_rel(p)}#{i}" for p, i, _ in YAML_BLOCKS])
def test_yaml_config_examples_validate(path, index, block):
    data = yaml.safe_load(block)
    if block.lstrip().startswith(NOT_A_CONFIG):
        return
    assert isinstance(data, dict), (
        f"{_rel(path)} yaml block {index} is not a mapping; "
        f"mark a block that is not a config with '{NOT_A_CONFIG}' on its first line"
    )
    base = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigNote)  # (an example spells every key the current way)
        parse_config(_merge(base, data), source=f"{_rel(path)} yaml block {index}")


def test_readme_is_short():
    lines = _text(ROOT / "README.md").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; keep it under 200 (topics go to docs/)"
