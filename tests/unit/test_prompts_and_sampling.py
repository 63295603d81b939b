"""Prompt templates, per-row sampling settings and their errors, without an engine (the
real engine's side is tests/engine/test_prompts_engine.py)."""

import json

import pytest

from pipeline import load_config
from pipeline.config import ConfigError
from pipeline.sampling import Sampling, SamplingError, check_answer, checked
from tasks import Generate, PromptTemplate, RowError, TemplateError, get_task_kind, task_columns


class ChatMLTokenizer:
    """Enough of a Hugging Face tokenizer for the task kinds: a ChatML chat template with a
    default system prompt, as SmolLM2's."""

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
        text = "" if messages[0]["role"] == "system" else "<|im_start|>system\nYou are helpful.<|im_end|>\n"
        for m in messages:
            text += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def test_template_prefix_runs_through_its_first_column_and_the_whitespace_after_it():
    t = PromptTemplate(ChatMLTokenizer(), "Context:\n{document}\n\nQ: {question} ({year})", system="Be brief.")
    a = t.split({"document": "Doc.", "question": "Why?", "year": 2024})
    b = t.split({"document": "Doc.", "question": "How?", "year": 1999})
    assert a.prefix == b.prefix and a.prefix.startswith("<|im_start|>system\nBe brief.")
    assert a.prefix.endswith("Context:\nDoc.\n\n") and a.suffix.startswith("Q: Why? (2024)")
    assert a.suffix.endswith("<|im_start|>assistant\n")
    assert t.required_columns == ("document", "question", "year")


def test_template_prefix_column_literal_braces_and_raw_text():
    t = PromptTemplate(
        ChatMLTokenizer(), "{{json}} {question} about {document}: end", prefix_column="document", chat_template=False
    )
    parts = t.split({"question": "Q", "document": "D"})
    assert (parts.prefix, parts.suffix) == ("{json} Q about D", ": end")


@pytest.mark.parametrize(
    "template, message",
    [
        ("no columns here", "names no input column"),
        ("{text!r}", "format spec or conversion"),
        ("{text:>10}", "format spec or conversion"),
        ("{a.b}", "is not a column name"),
        ("{0}", "is not a column name"),
        ("unclosed {text", "not valid"),
    ],
)
def test_bad_templates_are_refused_with_the_reason(template, message):
    with pytest.raises(TemplateError, match=message):
        PromptTemplate(ChatMLTokenizer(), template)


@pytest.mark.parametrize(
    "row, message",
    [
        ({"text": "t"}, "column title is missing (the prompt template names title, text)"),
        ({"title": None, "text": "t"}, "title is null"),
        ({"title": ["x"], "text": "t"}, "title is not text (got list)"),
    ],
)
def test_bad_rows_for_a_template_are_row_errors(row, message):
    with pytest.raises(RowError, match=message.replace("(", r"\(").replace(")", r"\)")):
        PromptTemplate(ChatMLTokenizer(), "{title}: {text}").split(row)


def test_generate_rows_prompt_prefix_and_messages():
    g = Generate(ChatMLTokenizer(), system="S")
    with_prefix = g.split({"prefix": "Shared doc. ", "prompt": "Q1"})
    assert with_prefix.prefix.endswith("Shared doc. ") and with_prefix.suffix.startswith("Q1")
    alone = g.split({"prompt": "Hello"})
    assert alone.prefix.endswith("Hello") and "S" in alone.prefix
    chat = g.split({"messages": [{"role": "user", "content": "Hi"}]})
    assert "Hi" in chat.prefix
    for row, message in (
        ({}, "neither prompt nor messages"),
        ({"prompt": "p", "messages": [{"role": "user", "content": "m"}]}, "both prompt and messages"),
    ):
        with pytest.raises(RowError, match=message):
            g.split(row)


def test_config_template_means_the_template_task_and_checks_it():
    config = load_config().replace(prompt={"template": "Summarize: {text}"})
    assert config.task == "template" and task_columns(config).required == ("text",)
    assert get_task_kind(config, ChatMLTokenizer()).required_columns == ("text",)
    with pytest.raises(ConfigError, match="prompt.prefix_column 'doc' is not in the template"):
        load_config().replace(prompt={"template": "{text}", "prefix_column": "doc"})
    with pytest.raises(ConfigError, match="task template needs prompt.template"):
        load_config().replace(task="template")
    with pytest.raises(ConfigError, match="give json_schema or choice, not both"):
        load_config().replace(sampling={"json_schema": {"type": "object"}, "choice": ["a"]})


def test_json_schema_from_a_file_inline_or_refused(tmp_path):
    path = tmp_path / "schema.json"
    path.write_text(json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}}))
    from_file = load_config().replace(sampling={"json_schema": str(path)}).sampling.json_schema
    inline = load_config().replace(sampling={"json_schema": path.read_text()}).sampling.json_schema
    assert from_file == inline == {"type": "object", "properties": {"a": {"type": "integer"}}}
    with pytest.raises(ConfigError, match="cannot read"):
        load_config().replace(sampling={"json_schema": str(tmp_path / "missing.json")})
    with pytest.raises(ConfigError, match="not a valid JSON schema"):
        load_config().replace(sampling={"json_schema": {"type": "no-such-type"}})


def test_row_sampling_values_checked_with_the_reason():
    assert checked({"document": "d"}) is None
    s = checked(
        {"max_tokens": 8.0, "temperature": 0, "top_p": 0.5, "top_k": 5, "stop": "\n", "seed": 3, "choice": ["a", "b"]}
    )
    assert s == Sampling(max_tokens=8, temperature=0.0, top_p=0.5, top_k=5, stop=["\n"], seed=3, choice=["a", "b"])
    for row, message in (
        ({"max_tokens": 0}, "max_tokens must be an integer >= 1 (got 0)"),
        ({"max_tokens": True}, "max_tokens must be an integer >= 1 (got True)"),
        ({"temperature": "hot"}, "temperature must be a number >= 0 (got 'hot')"),
        ({"temperature": float("nan")}, "temperature must be a number >= 0 (got nan)"),
        ({"top_p": 0}, "top_p must be a number in (0, 1] (got 0)"),
        ({"top_k": -2}, "top_k must be an integer >= -1 (0 or -1: off) (got -2)"),
        ({"stop": [""]}, "stop must be a non-empty string or a list of them (got [''])"),
        ({"choice": []}, "choice must be a non-empty list of non-empty strings (got [])"),
        (
            {"json_schema": "{nope"},
            "json_schema is not valid JSON (Expecting property name enclosed in double quotes at position 1)",
        ),
        ({"json_schema": "[1]"}, "json_schema must be a JSON schema (a JSON object) (got [1])"),
        ({"json_schema": "{}", "choice": ["a"]}, "json_schema and choice are both set; give one constraint"),
    ):
        with pytest.raises(SamplingError) as err:
            checked(row)
        assert str(err.value) == message, (row, str(err.value))


def test_row_settings_over_the_jobs():
    job = (
        load_config()
        .replace(sampling={"max_tokens": 16, "json_schema": {"type": "object"}})
        .sampling.as_sampling(engine_seed=7)
    )
    assert job.seed == 7 and job.max_tokens == 16 and job.json_schema == '{"type":"object"}'
    row = Sampling(max_tokens=4, choice=["x"]).over(job)
    assert (row.max_tokens, row.seed, row.choice, row.json_schema) == (4, 7, ["x"], None)
    assert Sampling(temperature=1.0).over(job).json_schema == job.json_schema


def test_json_answers_parsed_checked_or_explained():
    s = Sampling(json_schema=json.dumps({"type": "object", "required": ["a"]}))
    assert check_answer('{"a": 1}', s, False) == ('{"a":1}', None)
    assert check_answer('{"b": 1}', s, False)[1] == "answer does not match the JSON schema: 'a' is a required property"
    value, why = check_answer('{"a": ', s, True)
    assert value is None and why.startswith("answer is not valid JSON") and "raise max_tokens" in why
    assert check_answer("free text", Sampling(), False) == (None, None)


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize(
    "rows, plain",
    [
        ([{"title": "a", "text": "x"}, {"title": "a", "text": "y"}, {"title": "b", "text": "z"}], True),
        ([{"title": "a", "text": "x"}, {"title": None, "text": "y"}, {"title": "", "text": " "}], True),
        ([{"title": " \t", "text": "q"}, {"title": "é", "text": ""}, {"title": "a", "text": None}], True),
        ([{"title": "a", "text": "x"}, {"title": "b"}], False),
        ([{"title": "a", "text": "x"}, {"title": 3, "text": "y"}, {"title": ["l"], "text": "z"}], False),
        ([{"title": "a", "text": "x", "temperature": 0.5}, {"title": "a", "text": "y", "temperature": None}], False),
        ([{"title": "a", "text": "x"}, None, {"title": "a", "text": "q"}], False),
    ],
)
def test_a_streams_rows_column_wise_or_row_by_row_give_the_same_prompt_rows(rows, plain, strict):
    """A Python iterable's rows take the column-wise path where they are plain text and the
    row-by-row one where not: the same prompts, digests, documents and errors either way."""
    import pyarrow as pa

    from pipeline.steps.prompt_table import _text_columns, prompt_rows_of_dicts, prompt_rows_of_mappings

    task = PromptTemplate(ChatMLTokenizer(), "{title}\n\n{text} ({title})", strict_text=strict)
    batch = [(r, None) if r is not None else (None, "row 1 is not a mapping") for r in rows]
    assert (_text_columns(batch, task) is not None) == plain
    positions = pa.array(range(len(rows)), pa.int64())
    fast, slow = prompt_rows_of_mappings(batch, positions, task), prompt_rows_of_dicts(batch, positions, task)
    assert fast.rows.equals(slow.rows)
    assert fast.errors.equals(slow.errors)
    assert fast.documents.sort_by("digest").equals(slow.documents.sort_by("digest"))


def test_a_streams_documents_are_counted_per_digest_without_arrows_dataset_library():
    """Each document of a stream's partition: its rows, its suffix bytes and its first row, as the rows say. Counting
    them must not load Arrow's dataset library (Table.group_by and join do): ~50 MB more in the caller's process."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import sys
        from collections import defaultdict
        import pyarrow as pa
        from pipeline.steps.prompt_table import prompt_rows_of_mappings
        from tasks import PromptTemplate

        class Tok:
            def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, **kw):
                return "".join(f"<{m['role']}>{m['content']}</>" for m in messages) + "<assistant>"

        rows = [{"doc": d, "q": q} for d, q in [("a", "1"), ("b", "22"), ("a", "333"), ("c", ""), ("b", "4")]]
        task = PromptTemplate(Tok(), "{doc}\\n\\nQ: {q}", prefix_column="doc")
        out = prompt_rows_of_mappings([(r, None) for r in rows], pa.array(range(10, 15), pa.int64()), task)
        want = defaultdict(lambda: [0, 0, 10**9])
        columns = (out.rows.column(n).to_pylist() for n in ("position", "digest", "suffix"))
        for position, digest, suffix in zip(*columns):
            w = want[digest]
            w[0], w[1], w[2] = w[0] + 1, w[1] + len(suffix.encode()), min(w[2], position)
        docs = out.documents.to_pylist()
        assert {d["digest"]: [d["rows"], d["suffix_bytes"], d["first"]] for d in docs} == dict(want), docs
        assert sorted(d["rows"] for d in docs) == [1, 2, 2]
        assert "pyarrow.dataset" not in sys.modules
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr
