"""Parquet and OpenAI batch jobs through the whole client/Dask/worker path with the fake engine
(it answers "" and counts one token per character): one output row per input row, in input
order, each bad row with its error, refusals with their reasons."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import JobError, Pipeline, load_config, prepare_job, run_job
from pipeline.bench.workloads import document_questions

MAX_MODEL_LEN = 1000
MAX_TOKENS = 32


@pytest.fixture(scope="module")
def null_pipeline():
    config = load_config().replace(
        scheduler={"dashboard_address": None},
        engine={"max_model_len": MAX_MODEL_LEN},
        sampling={"max_tokens": MAX_TOKENS},
        intake={"read_ahead_rows": 50},
    )
    with Pipeline(config, engine="fake") as p:
        yield p


def short_rows(n_docs=10, per_doc=3, seed=1):
    """Workload rows with documents cut to fit the small test context."""
    return [
        {**r, "document": r["document"][:300]} for r in document_questions(n_docs, per_doc, seed=seed, order="shuffled")
    ]


def run(null_pipeline, rows_or_table, tmp_path, name="out.parquet", **options):
    src = tmp_path / "in.parquet"
    table = rows_or_table if isinstance(rows_or_table, pa.Table) else pa.Table.from_pylist(rows_or_table)
    pq.write_table(table, src)
    notes = []
    summary = run_job(null_pipeline, src, tmp_path / name, progress=False, notify=notes.append, **options)
    return summary, pq.read_table(tmp_path / name).to_pylist(), notes


def test_one_output_row_per_input_row_in_input_order(null_pipeline, tmp_path):
    rows = short_rows(20, 3)
    summary, out, notes = run(null_pipeline, rows, tmp_path, part_rows=7)
    assert [o["id"] for o in out] == [r["id"] for r in rows]
    assert [o["expected"] for o in out] == [r["expected"] for r in rows]  # passthrough column, right row
    assert all(o["error"] is None and o["answer"] == "" for o in out)
    assert summary.rows == len(rows) and summary.errors == 0 and notes == []
    assert "document" not in out[0] and "question" not in out[0]
    assert not (tmp_path / "out.parquet.partial").exists()  # parts merged into one file, folder gone


def test_bad_rows_get_their_error_and_the_job_goes_on(null_pipeline, tmp_path):
    rows = short_rows(3, 2)
    rows[0]["document"] = None
    rows[1]["question"] = "   "
    rows[2]["document"] = ""
    rows[3]["question"] = None
    summary, out, _ = run(null_pipeline, rows, tmp_path)
    assert [o["error"] for o in out] == [
        "input: document is null",
        "input: question is empty",
        "input: document is empty",
        "input: question is null",
        None,
        None,
    ]
    assert [o["id"] for o in out] == [r["id"] for r in rows]
    assert all(o["answer"] is None for o in out[:4])
    assert summary.errors == 4 and summary.errors_by_kind == {
        "input: document is null": 1,
        "input: question is empty": 1,
        "input: document is empty": 1,
        "input: question is null": 1,
    }
    assert "input: document is null: 1" in summary.render()


def test_non_text_and_undecodable_values(null_pipeline, tmp_path):
    bad_utf8 = pa.array([b"caf\xc3\xa9 ok", b"\xff\xfe broken", b"fine"], pa.binary()).view(pa.string())
    table = pa.table({"id": ["a", "b", "c"], "document": bad_utf8, "question": pa.array([1, 2, None], pa.int64())})
    _, out, _ = run(null_pipeline, table, tmp_path)
    assert [o["error"] for o in out] == [
        "input: question is not text (got int)",
        "input: document is not valid UTF-8 text (byte 0)",
        "input: question is null",
    ]
    raw = pa.table(
        {"id": ["x", "y"], "document": pa.array([b"bytes doc", b"\xc3("], pa.binary()), "question": ["q1", "q2"]}
    )
    _, out, _ = run(null_pipeline, raw, tmp_path, name="out2.parquet")
    assert [o["error"] for o in out] == [None, "input: document is not valid UTF-8 text (byte 0)"]


def test_prompt_longer_than_context_errors_or_is_truncated(null_pipeline, tmp_path):
    rows = short_rows(2, 1)
    rows[0]["document"] = "x" * (2 * MAX_MODEL_LEN)
    summary, out, _ = run(null_pipeline, rows, tmp_path)
    assert out[0]["error"].startswith("input: prompt too long (")
    assert f"the model's context (engine.max_model_len) is {MAX_MODEL_LEN}" in out[0]["error"]
    assert "--truncate" in out[0]["error"]
    assert out[1]["error"] is None
    assert summary.errors_by_kind == {"input: prompt too long": 1}

    _, out, _ = run(null_pipeline, rows, tmp_path, name="truncated.parquet", truncate=True)
    assert out[0]["error"] is None and out[0]["prompt_tokens"] == MAX_MODEL_LEN - MAX_TOKENS
    assert out[1]["error"] is None and out[1]["prompt_tokens"] < MAX_MODEL_LEN


def test_duplicate_ids_are_refused_with_the_ids_unless_allowed(null_pipeline, tmp_path):
    rows = short_rows(3, 2)
    rows[2]["id"] = rows[0]["id"]
    rows[5]["id"] = rows[4]["id"]
    with pytest.raises(JobError) as err:
        run(null_pipeline, rows, tmp_path)
    msg = str(err.value)
    assert "2 id value(s) used by more than one row" in msg
    assert repr(rows[0]["id"]) + " (2 times)" in msg and repr(rows[4]["id"]) in msg
    assert "--allow-duplicate-ids" in msg
    assert not (tmp_path / "out.parquet").exists() and not (tmp_path / "out.parquet.partial").exists()
    summary, out, _ = run(null_pipeline, rows, tmp_path, allow_duplicate_ids=True)
    assert [o["id"] for o in out] == [r["id"] for r in rows] and summary.rows == 6


def test_without_id_rows_are_keyed_by_position_and_the_user_is_told(null_pipeline, tmp_path):
    rows = [{"document": r["document"], "question": r["question"]} for r in short_rows(2, 2)]
    _, out, notes = run(null_pipeline, rows, tmp_path)
    assert [o["id"] for o in out] == [0, 1, 2, 3]
    assert len(notes) == 1 and "has no id column" in notes[0] and "position" in notes[0]


def test_folder_and_glob_inputs_read_as_one_dataset_in_name_order(null_pipeline, tmp_path):
    rows = short_rows(4, 3)
    folder = tmp_path / "parts"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(rows[6:]), folder / "b.parquet")
    pq.write_table(pa.Table.from_pylist(rows[:6]), folder / "a.parquet")
    (folder / "_SUCCESS").write_text("")  # not data: skipped as Spark and pyarrow do
    run_job(null_pipeline, folder, tmp_path / "from-folder.parquet", progress=False)
    run_job(null_pipeline, str(folder / "*.parquet"), tmp_path / "from-glob.parquet", progress=False)
    for name in ("from-folder.parquet", "from-glob.parquet"):
        assert pq.read_table(tmp_path / name).column("id").to_pylist() == [r["id"] for r in rows]


def test_openai_batch_jsonl_in_and_out(null_pipeline, tmp_path):
    lines = [
        {
            "custom_id": "r1",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": "any",
                "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}],
                "max_tokens": 8,
            },
        },
        "this is not json",
        {"custom_id": "r3", "method": "POST", "url": "/v1/chat/completions", "body": {"input": "x"}},
        {"custom_id": "r4", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": []}},
        {
            "custom_id": "r5",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}]},
        },
    ]
    src = tmp_path / "batch.jsonl"
    src.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n\n")
    summary = run_job(null_pipeline, src, tmp_path / "results.jsonl", progress=False)
    out = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [o["custom_id"] for o in out] == ["r1", None, "r3", "r4", "r5"]
    assert summary.rows == 5 and summary.errors == 3
    ok = out[0]
    assert ok["error"] is None and ok["response"]["status_code"] == 200
    body = ok["response"]["body"]
    assert body["object"] == "chat.completion" and body["choices"][0]["message"] == {"role": "assistant", "content": ""}
    assert body["usage"]["prompt_tokens"] > len("What is 2+2?")  # rendered with the chat template
    assert out[4]["error"] is None
    assert out[1]["response"]["status_code"] == 400
    assert out[1]["error"]["code"] == "input" and out[1]["error"]["message"].startswith("input: line is not valid JSON")
    assert out[2]["error"] == {"code": "input", "message": "input: messages is missing"}
    assert out[3]["error"]["message"] == "input: messages must be a non-empty list"


def test_openai_batch_duplicate_custom_ids_refused(tmp_path):
    line = {"method": "POST", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": "hi"}]}}
    src = tmp_path / "batch.jsonl"
    src.write_text("".join(json.dumps({**line, "custom_id": c}) + "\n" for c in ("a", "b", "a")))
    with pytest.raises(JobError, match=r"1 custom_id value\(s\) used by more than one row: 'a' \(2 times\)"):
        prepare_job(src, tmp_path / "out.jsonl", notify=lambda m: None)


def without_time(line):
    """An output line without the one field that differs between two runs: the job's start time."""
    out = json.loads(line)
    if out["response"]["body"]:
        del out["response"]["body"]["created"]
    return out


def test_parquet_resume_discards_a_half_written_part(null_pipeline, tmp_path):
    rows = short_rows(3, 2)
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    job = prepare_job(src, tmp_path / "out.parquet", notify=lambda m: None)
    (job.sink.dir / ".part-000000.parquet.tmp").write_bytes(b"PAR1 half a part")
    job = prepare_job(src, tmp_path / "out.parquet", notify=lambda m: None)
    assert job.done == 0 and not list(job.sink.dir.glob(".part-*"))
    job.run(null_pipeline, progress=False)
    assert pq.read_table(tmp_path / "out.parquet").column("id").to_pylist() == [r["id"] for r in rows]


def test_a_chat_renders_exactly_as_the_document_question_task_with_the_models_template(null_pipeline):
    from tasks import Chat, DocumentQuestion
    from tasks.document_question import INSTRUCTION

    row = document_questions(1, 1, seed=32)[0]
    content = f"{INSTRUCTION}\n\nDocument:\n{row['document']}\n\nQuestion: {row['question']}"
    chat = Chat(null_pipeline.tokenizer).split({"messages": [{"role": "user", "content": content}]})
    task = DocumentQuestion(null_pipeline.tokenizer).split(row)
    assert chat.prefix + chat.suffix == task.prefix + task.suffix
    assert chat.suffix.startswith("<|im_end|>") and chat.suffix.endswith("<|im_start|>assistant\n")


def test_an_id_column_that_cannot_key_rows_is_refused(tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [[1], [2]], "document": ["d", "d"], "question": ["q", "q"]}), src)
    with pytest.raises(JobError, match=r"the id column has type list<.*>, which cannot key rows"):
        prepare_job(src, tmp_path / "out.parquet", notify=lambda m: None)


def test_template_naming_a_missing_column_is_refused_before_anything_runs(null_pipeline, tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": ["a"], "text": ["t"]}), src)
    with pytest.raises(JobError) as err:
        run_job(null_pipeline, src, tmp_path / "out.parquet", progress=False, prompt={"template": "{title}: {text}"})
    assert str(err.value) == f"input {src} lacks required column(s) title; it has: id, text"
    assert not (tmp_path / "out.parquet.partial").exists()


def test_template_job_row_settings_and_json_columns(null_pipeline, tmp_path):
    table = pa.table(
        {
            "id": ["a", "b", "c"],
            "text": ["one", "two", "three"],
            "temperature": [0.5, -1.0, None],
            "max_tokens": [4, None, 2],
        }
    )
    summary, out, _ = run(null_pipeline, table, tmp_path, prompt={"template": "Summarize: {text}"})
    assert [o["error"] for o in out] == [None, "input: temperature must be a number >= 0 (got -1.0)", None]
    assert [o["id"] for o in out] == ["a", "b", "c"] and out[0]["finish_reason"] == "stop"
    assert "text" not in out[0] and out[0]["max_tokens"] == 4  # the prompt's column is not copied; the rest is
    assert "answer_json" not in out[0]
    # a JSON job: the fake engine's empty answer is not JSON, and the row says so
    _, out, _ = run(
        null_pipeline,
        table.drop(["temperature"]),
        tmp_path,
        name="json.parquet",
        prompt={"template": "Summarize: {text}"},
        sampling={"json_schema": {"type": "object"}},
    )
    assert all(o["answer_json"] is None for o in out)
    assert out[0]["error"].startswith("output: answer is not valid JSON (Expecting value")


def one_document_rows(n):
    """Rows whose prompts differ only in their question's length (the fake engine counts one
    token per character): row i's prompt is i tokens longer than row 0's."""
    document = short_rows(1, 1)[0]["document"]
    return [
        {"id": f"r{i}", "document": document, "question": "Why" + "?" * (i + 1), "expected": f"e{i}"} for i in range(n)
    ]


def assert_answered_in_place(out, rows):
    assert [o["id"] for o in out] == [r["id"] for r in rows]
    assert [o["expected"] for o in out] == [r["expected"] for r in rows]
    assert all(o["error"] is None and o["answer"] == "" for o in out)
    assert [o["prompt_tokens"] - out[0]["prompt_tokens"] for o in out] == list(range(len(rows)))


def test_file_urls_name_local_input_and_output(null_pipeline, tmp_path):
    rows = one_document_rows(12)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    summary = run_job(
        null_pipeline, f"file://{tmp_path}/in.parquet", tmp_path / "a.parquet", progress=False, notify=lambda m: None
    )
    assert summary.rows == len(rows) and summary.errors == 0
    assert_answered_in_place(pq.read_table(tmp_path / "a.parquet").to_pylist(), rows)

    summary = run_job(
        null_pipeline,
        tmp_path / "in.parquet",
        f"file://{tmp_path}/b.parquet",
        progress=False,
        part_rows=5,
        notify=lambda m: None,
    )
    assert summary.rows == len(rows) and summary.errors == 0
    assert_answered_in_place(pq.read_table(tmp_path / "b.parquet").to_pylist(), rows)
    assert not (tmp_path / "b.parquet.partial").exists()


def test_file_urls_for_openai_batch_jsonl(null_pipeline, tmp_path):
    src = tmp_path / "batch.jsonl"
    src.write_text(
        "".join(
            json.dumps(
                {
                    "custom_id": f"r{i}",
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": {"messages": [{"role": "user", "content": "Say" + "!" * i}]},
                }
            )
            + "\n"
            for i in range(6)
        )
    )
    run_job(null_pipeline, f"file://{src}", f"file://{tmp_path}/out.jsonl", progress=False, notify=lambda m: None)
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [o["custom_id"] for o in out] == [f"r{i}" for i in range(6)]
    tokens = [o["response"]["body"]["usage"]["prompt_tokens"] for o in out]
    assert [t - tokens[0] for t in tokens] == list(range(6))
