"""OpenAI batch lines for /v1/completions with the fake engine: a prompt, or a list of them, each
answered as a row of the completion task and gathered back into one ``text_completion`` line
that the ``openai`` package's own type reads; the prompts of a line share the document they
begin with (one group, one shard); bad lines are error lines naming the field. The real model's
answers: tests/engine/test_completion_lines_engine.py."""

import json

import pytest
from openai.types import Completion

from pipeline import Pipeline, load_config, prepare_job
from pipeline.data.completion_lines import line_rows, shared_length
from tasks import Completion as CompletionTask

DOC = "The Nile flows north through eleven countries. " * 12


def request(custom_id, url="/v1/completions", **body):
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


@pytest.mark.parametrize(
    "prompts, shared",
    [
        ([DOC + "\n\nQ: How long is it?\nA:", DOC + "\n\nQ: Where does it end?\nA:"], DOC.rstrip()),
        ([DOC + "\n\nQ: How long is it?\nA:"], DOC.rstrip()),  # one prompt: its last blank line
        (["Context: " + DOC + "\nQ: How long?\nA:", "Context: " + DOC + "\nQ: Why?\nA:"], "Context: " + DOC.rstrip()),
        (["Translate: cat", "Translate: dog"], ""),  # no line end in common: none
        (["Q: How long is the Nile?\nA:"], ""),  # one line, no blank line: none
    ],
)
def test_a_lines_prompts_share_the_text_they_begin_with_cut_before_its_line_end(prompts, shared):
    cut = shared_length(prompts)
    assert prompts[0][:cut] == shared
    rows = line_rows(0, request("x", prompt=prompts if len(prompts) > 1 else prompts[0], max_tokens=4), None)
    task = CompletionTask()
    for (row, error, carry), prompt in zip(rows, prompts):
        parts = task.split(row)
        assert error is None and parts.prefix + parts.suffix == prompt and row["max_tokens"] == 4
        assert parts.prefix == (shared or prompt)  # no shared part: the whole prompt is its own group
    assert [c["index"] for _, _, c in rows] == list(range(len(prompts)))


LINES = [
    request("one", prompt=DOC + "\n\nQ: How long is it?\nA:", max_tokens=5, temperature=0),
    request("four", prompt=[DOC + f"\n\nQ: Question {k}?\nA:" for k in range(4)], n=2, logprobs=2, seed=3),
    request("ids", prompt=[464, 3290]),
    request("echo", prompt="hi", echo=True),
    request("nothing", max_tokens=3),
    request("empty", prompt=["fine", ""]),
    request("stream", prompt="hi", stream=True),
    "not json",
    request("hot", prompt="x", temperature=-1),
]


@pytest.fixture(scope="module")
def fake_pipeline():
    config = load_config().replace(scheduler={"dashboard_address": None})
    with Pipeline(config, engine="fake") as p:
        yield p


def test_completion_lines_answer_as_openais_text_completion(fake_pipeline, tmp_path):
    src = tmp_path / "batch.jsonl"
    src.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in LINES))
    job = prepare_job(
        src,
        tmp_path / "out.jsonl",
        config=fake_pipeline.config.replace(jobs={"partition_bytes": 900}),
        notify=lambda m: None,
    )
    summary = job.run(fake_pipeline, progress=False)
    out = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [o["custom_id"] for o in out] == ["one", "four", "ids", "echo", "nothing", "empty", "stream", None, "hot"]
    assert [o["id"] for o in out] == [f"pipeline-{i}" for i in range(len(LINES))]
    one, four = (Completion.model_validate(o["response"]["body"]) for o in out[:2])
    assert one.object == "text_completion" and len(one.choices) == 1 and one.choices[0].logprobs is None
    # the fake engine counts a prompt's characters: each prompt went whole, and once
    assert one.usage.prompt_tokens == len(LINES[0]["body"]["prompt"])
    prompts = LINES[1]["body"]["prompt"]
    assert four.usage.prompt_tokens == sum(map(len, prompts))
    assert [c.index for c in four.choices] == list(range(8)) and all(c.logprobs is not None for c in four.choices)
    assert four.usage.total_tokens == four.usage.prompt_tokens + four.usage.completion_tokens
    # a row per prompt (line "empty" has two); the five prompts of DOC are one group, on one shard
    assert summary.rows == 13 and summary.errors == 7 and max(summary.per_shard.values()) >= 5
    errors = {o["custom_id"]: o["error"]["message"] for o in out[2:]}
    assert {o["error"]["code"] for o in out[2:]} == {"input"}
    assert errors == {
        "ids": "input: body.prompt: token ids are not supported; give the prompt as text",
        "echo": "input: body.echo is not supported (the answer's text only)",
        "nothing": "input: body.prompt is missing",
        "empty": "input: prompt 1: prompt is empty",
        "stream": "input: body asks for stream; a batch's answers are not streamed",
        None: "input: line is not valid JSON (Expecting value at column 1)",
        "hot": "input: temperature must be a number >= 0 (got -1)",
    }
    assert all(o["response"]["status_code"] == 400 and o["response"]["body"] is None for o in out[2:])
