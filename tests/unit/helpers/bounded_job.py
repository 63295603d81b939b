"""Run a Parquet job in this process with an in-process answerer instead of a cluster, and
print the peak memory it added (JSON on stdout): first a small job (imports, allocator
arenas and other fixed costs), then the measured one.

Used by tests/unit/test_job_scale.py: a million rows through the job's streaming reader,
reordering and writer, which a unit test cannot push through the Dask cluster in time.
The answerer returns each row's question reversed, out of order within a window, so the
test can check that every answer lands on its own row.
"""
import json
import sys
from pathlib import Path


class ChatML:
    """The tokenizer part of a Pipeline the job uses: its chat template (the job builds its task)."""

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


class ReversingAnswerer:
    """Answers rows out of order (a window at a time, last first), as a cluster would."""

    def __init__(self, window: int):
        self.window = window
        self.last_report = None  # as Pipeline: what happened to workers (nothing here)
        self.tokenizer = ChatML()

    def stream(self, rows, task=None, sampling=None, truncate_prompts=False, watched=False, rows_total=None):
        held = []
        read = 0
        for i, row in enumerate(rows):
            read += 1
            held.append((i, row["question"]))
            if len(held) == self.window:
                yield from self._answer(held)
                held = []
        yield from self._answer(held)
        # the job told the pipeline how many rows its input holds (the dashboard's progress)
        assert rows_total == read, (rows_total, read)

    def _answer(self, held):
        from pipeline.results import RowResult

        for i, q in reversed(held):
            yield RowResult(index=i, id=None, answer=q[::-1], error=None, prompt_tokens=len(q), completion_tokens=1)


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


if __name__ == "__main__":
    warm_src, warm_dst, src, dst = sys.argv[1:5]
    from pipeline.config import load_config
    from pipeline.jobs.job import prepare_job

    client_path = load_config().replace(jobs={"path": "client"})   # the client's own job loop
    prepare_job(warm_src, warm_dst, part_rows=50_000, notify=lambda m: None, config=client_path).run(
        ReversingAnswerer(5000), progress=False)
    baseline = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
    job = prepare_job(src, dst, part_rows=50_000, notify=lambda m: None, config=client_path)
    summary = job.run(ReversingAnswerer(window=5000), progress=False)
    print(json.dumps({"rows": summary.rows, "errors": summary.errors, "baseline_rss": baseline,
                      "peak_rss": _status("VmHWM")}))
