"""OpenAI batch /v1/completions lines on the real engine: each line's answers read as the
``openai`` package's own Completion; a prompt cut into its shared document and its own rest is
the same tokens as the whole prompt (usage), answers greedily what the same prompt alone
answers, and the prompts after the first are served the document from the prefix cache; the
log-probabilities are OpenAI's legacy shape, consistent with the text."""
import json

import pyarrow.parquet as pq
from openai.types import Completion

from pipeline.jobs.job import run_job

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def test_completion_lines_on_the_real_engine(pipeline, tmp_path):
    documents = list(dict.fromkeys(pq.read_table(ROOT / "datasets/sample.parquet").column("document").to_pylist()))[:2]
    questions = ["What is this about?", "Who is named?", "When did it happen?", "Why does it matter?"]
    prompts = [[f"{d}\n\nQuestion: {q}\nAnswer:" for q in questions] for d in documents]
    lines = [{"custom_id": f"doc-{k}", "method": "POST", "url": "/v1/completions",
              "body": {"model": "any", "prompt": p, "max_tokens": 8, "temperature": 0, "logprobs": 2}}
             for k, p in enumerate(prompts)]
    lines.append({"custom_id": "alone", "method": "POST", "url": "/v1/completions",
                  "body": {"prompt": prompts[0][1], "max_tokens": 8, "temperature": 0}})
    src = tmp_path / "completions.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    run_job(pipeline, src, tmp_path / "out.jsonl", progress=False)
    out = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [o["custom_id"] for o in out] == ["doc-0", "doc-1", "alone"] and all(o["error"] is None for o in out)
    bodies = [Completion.model_validate(o["response"]["body"]) for o in out]

    def tokens(text):
        return len(pipeline.tokenizer.encode(text, add_special_tokens=False))

    for body, line in zip(bodies[:2], prompts):
        assert [c.index for c in body.choices] == [0, 1, 2, 3] and any(c.text.startswith(" ") for c in body.choices)
        assert body.usage.prompt_tokens == sum(tokens(p) for p in line)   # the cut pieces: the whole prompt's tokens
        document = tokens(line[0].split("\n\n")[0]) // pipeline.block_size * pipeline.block_size
        assert body.usage.prompt_tokens_details.cached_tokens >= 3 * document   # prefilled once
        for choice in body.choices:
            lp = choice.logprobs
            # the text as generated, its leading space kept (the end-of-text token has no text)
            assert "".join(lp.tokens).startswith(choice.text) and len(lp.token_logprobs) == len(lp.tokens)
            assert choice.finish_reason == "stop" or "".join(lp.tokens) == choice.text
            assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
            assert all(x <= 0 for x in lp.token_logprobs) and all(1 <= len(top) <= 3 for top in lp.top_logprobs)
            assert body.usage.completion_tokens >= len(lp.tokens)
    (alone,) = bodies[2].choices
    assert alone.text == bodies[0].choices[1].text and alone.logprobs is None   # greedy: the same prompt, alike
