#!/usr/bin/env python
"""Several answers per row prefill the prompt once (sampling.n, issue 44): the same rows answered
with n = 1 and n = 4 (one new token each, so prefill dominates), the prefix caches emptied before
each run, twice, on the default model and cluster. Prints each run's time and token figures: with
the prompt prefilled once, n = 4 takes far less than 4 x n = 1's time, and its prompt's full
blocks show as cached (served to the other answers from the first one's prefill).

    .venv/bin/python scripts/several_answers.py [--docs 32]
"""

import argparse
import time

from pipeline import Pipeline, load_config
from pipeline.bench.workloads import document_questions

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=32)
    args = ap.parse_args()
    rows = document_questions(args.docs, 1, seed=7)
    with Pipeline(load_config().replace(scheduler={"dashboard_address": None})) as p:
        p.run(rows[:4], sampling={"max_tokens": 1})  # (warm)
        for n in (1, 4, 1, 4):
            p.reset_cache()
            t0 = time.perf_counter()
            res = p.run(rows, sampling={"max_tokens": 1, "n": n, "temperature": 1.0})
            took = time.perf_counter() - t0
            print(
                f"n={n}: {took:.2f} s; rows {len(res)}, errors {sum(r.error is not None for r in res)}; "
                f"prompt tokens {sum(r.prompt_tokens for r in res)}, cached {sum(r.cached_tokens for r in res)}, "
                f"completion {sum(r.completion_tokens for r in res)}; answers per row {len(res[0].choices or [0])}",
                flush=True,
            )
