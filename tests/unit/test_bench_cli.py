"""The benchmarks' command line (pipeline/bench/cli.py) and how a bench run gets its settings
(a config passed down, the pipeline's own left as it is), without engines."""
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline.__main__ import _parser, main
from pipeline.bench.cli import bench_config
from pipeline.bench.contenders import Prepared, run_pipeline
from pipeline.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]


def test_router_bench_is_a_subcommand(capsys):
    args = _parser().parse_args(["router-bench", "--shards", "4", "--documents", "50", "--block-size", "8"])
    assert (args.command, args.shards, args.documents, args.questions_per_doc, args.block_size,
            args.max_blocks) == ("router-bench", 4, 50, 4, 8, 1_000_000)
    assert main(["router-bench", "--shards", "4", "--documents", "50"]) == 0
    out = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert out["shards"] == "4" and out["requests"] == "200" and float(out["us_per_request"]) > 0
    with pytest.raises(SystemExit) as exc:
        main(["router-bench", "--help"])
    assert exc.value.code == 0
    assert "--max-blocks" in capsys.readouterr().out


def test_bench_options_and_defaults():
    a = _parser().parse_args(["bench"])
    assert (a.pairs, a.bursts, a.documents, a.questions_per_doc, a.skewed_requests, a.filler_sentences,
            a.contenders, a.engine_mode, a.engine_env, a.null_questions, a.out, a.write_docs, a.experiments) == \
        (5, "no_reuse,reuse,skewed", 64, 4, 256, 50, None, "config", [], 20_000, "bench-out", False, False)


def test_bench_config_is_a_new_config():
    config = load_config()
    out = bench_config(config, "eager", ["MALLOC_TRIM_THRESHOLD_=65536"])
    assert out.engine.enforce_eager is True
    assert all(s.env["MALLOC_TRIM_THRESHOLD_"] == "65536" for s in out.shards)
    assert all("MALLOC_TRIM_THRESHOLD_" not in s.env for s in config.shards)
    assert bench_config(config, "config", []) is config
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        bench_config(config, "config", ["NOVALUE"])


def test_bench_refuses_contenders_without_the_pipeline():
    proc = subprocess.run([sys.executable, "-m", "pipeline", "bench", "--contenders", "standalone-rr"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2 and "error: --contenders 'standalone-rr'" in proc.stderr
    assert "Traceback" not in proc.stderr


class FakePipeline:
    """What run_pipeline uses of a started pipeline; ``stream`` records the config it ran with."""

    def __init__(self, config):
        self.config = config
        self.ran_with = []
        self.reset_cache()

    def reset_cache(self):
        self.transfer = SimpleNamespace(encoded_bytes=1, raw_bytes=40, batches=1)

    def worker_stats(self):
        return [{"shard": "s0", "gc": {}, "metrics": {"engine_busy_s": 0.0}}]

    def stream(self, rows):
        self.ran_with.append(self.config)
        for i, row in enumerate(rows):
            yield SimpleNamespace(index=i, error=None, answer=row["expected"], prompt_tokens=10, cached_tokens=4,
                                  completion_tokens=2, shard="s0")


def test_run_pipeline_runs_with_the_config_passed_and_leaves_the_pipelines():
    config = load_config()
    pipeline = FakePipeline(config)
    prep = Prepared([{"expected": "x"}, {"expected": "y"}], [[1, 2], [1, 2]], [[3], [4]], 4, 4)
    job = config.replace(intake={"first_answer_rows": 0, "batch_size": 8})
    r = run_pipeline(pipeline, job, prep, "reuse", 0)
    assert pipeline.ran_with == [job] and pipeline.config is config
    assert (r.requests, r.answered, r.correct, r.prompt_tokens, r.cached_tokens) == (2, 2, 2, 20, 8)
    assert (r.encoded_bytes, r.raw_bytes) == (1, 40) and r.per_shard == {"s0": 2}
    run_pipeline(pipeline, config, prep, "reuse", 1)
    assert pipeline.ran_with == [job, config]
