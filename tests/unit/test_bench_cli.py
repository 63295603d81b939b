"""The benchmarks' command line (pipeline/cli/bench.py) and how a bench run gets its settings
(a config passed down, the pipeline's own left as it is), without engines."""

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline.bench.contenders import Prepared, run_pipeline
from pipeline.cli.bench import bench_config
from pipeline.cli.main import _parser
from pipeline.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]


def test_bench_options_and_defaults():
    a = _parser().parse_args(["bench"])
    assert (
        a.pairs,
        a.bursts,
        a.documents,
        a.questions_per_doc,
        a.skewed_requests,
        a.filler_sentences,
        a.contenders,
        a.engine_mode,
        a.engine_env,
        a.null_questions,
        a.out,
        a.write_docs,
    ) == (5, "no_reuse,reuse,skewed", 64, 4, 256, 50, None, "config", [], 20_000, "bench-out", False)


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
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "bench", "--contenders", "standalone-rr"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 2 and "error: --contenders 'standalone-rr'" in proc.stderr
    assert "Traceback" not in proc.stderr


class FakePipeline:
    """What run_pipeline uses of a started pipeline; ``stream`` records the config it ran with."""

    def __init__(self, config):
        self.config = config
        self.ran_with = []

    def reset_cache(self):
        pass

    def worker_stats(self):
        return [{"shard": "s0", "gc": {}, "metrics": {"engine_busy_s": 0.0}}]

    def stream(self, rows):
        self.ran_with.append(self.config)
        for i, row in enumerate(rows):
            yield SimpleNamespace(
                index=i,
                error=None,
                answer=row["expected"],
                prompt_tokens=10,
                cached_tokens=4,
                completion_tokens=2,
                shard="s0",
            )


def test_run_pipeline_runs_with_the_config_passed_and_leaves_the_pipelines():
    config = load_config()
    pipeline = FakePipeline(config)
    prep = Prepared([{"expected": "x"}, {"expected": "y"}], [[1, 2], [1, 2]], [[3], [4]], 4, 4)
    job = config.replace(intake={"first_answer_rows": 0})
    r = run_pipeline(pipeline, job, prep, "reuse", 0)
    assert pipeline.ran_with == [job] and pipeline.config is config
    assert (r.requests, r.answered, r.correct, r.prompt_tokens, r.cached_tokens) == (2, 2, 2, 20, 8)
    assert r.per_shard == {"s0": 2}
    run_pipeline(pipeline, config, prep, "reuse", 1)
    assert pipeline.ran_with == [job, config]


def test_bigjob_options_burst_and_contenders():
    from pipeline.bench.options import ALL_CONTENDERS, CONTENDERS, KNOWN_BURSTS, BenchOptions, burst_rows

    a = _parser().parse_args(["bench"])
    assert (a.bigjob_docs, a.bigjob_questions) == (480, 3)
    assert (BenchOptions().bigjob_docs, BenchOptions().bigjob_questions) == (480, 3)
    assert "bigjob" not in BenchOptions().bursts and "bigjob" in KNOWN_BURSTS  # long: only when asked for
    assert BenchOptions().contenders == CONTENDERS == ("standalone-rr", "standalone-routed", "pipeline")
    assert set(ALL_CONTENDERS) - set(CONTENDERS) == {"standalone-arrival", "standalone-sorted"}
    a = _parser().parse_args(
        [
            "bench",
            "--bursts",
            "bigjob",
            "--bigjob-docs",
            "6",
            "--bigjob-questions",
            "2",
            "--contenders",
            "standalone-arrival,standalone-sorted,pipeline",
        ]
    )
    assert (a.bursts, a.bigjob_docs, a.bigjob_questions, a.contenders) == (
        "bigjob",
        6,
        2,
        "standalone-arrival,standalone-sorted,pipeline",
    )
    rows = burst_rows("bigjob", BenchOptions(bigjob_docs=6, bigjob_questions=2, filler_sentences=2), seed=3)
    assert len(rows) == 12 and all(r["id"].startswith("bigjob-") for r in rows)
    docs = [r["doc_id"] for r in rows]
    assert sorted(set(docs)) == [f"d{d:05d}" for d in range(6)] and all(docs.count(d) == 2 for d in set(docs))
    assert docs != sorted(docs)  # shuffled: siblings scattered


def test_bench_refuses_unknown_bursts():
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "bench", "--bursts", "reuse,huge"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 2 and "error: --bursts 'reuse,huge'" in proc.stderr and "bigjob" in proc.stderr
    assert "Traceback" not in proc.stderr


def _doc_rows(n_docs=40, questions=3, seed=0):
    from pipeline.bench.workloads import document_questions

    return document_questions(n_docs, questions, filler_sentences=2, seed=seed, order="shuffled")


def test_placed_assignment_places_documents_as_a_cluster_job():
    import numpy as np

    from pipeline.bench.contenders import placed_assignment
    from pipeline.prefix_memory import prefix_digest
    from pipeline.steps.placement import place_documents

    rows = _doc_rows()
    prefixes, suffixes = [r["document"] for r in rows], [r["question"] for r in rows]
    shards, decode = ["cpu0", "cpu1"], 4 * 64
    arrival = placed_assignment(prefixes, suffixes, shards, decode)
    by_doc = placed_assignment(prefixes, suffixes, shards, decode, by_document=True)
    for assign in (arrival, by_doc):
        assert sorted(i for v in assign.values() for i in v) == list(range(len(rows)))  # every row once
        assert all(assign[s] for s in shards)
        shard_of_doc = {}
        for s, idx in assign.items():
            for i in idx:
                assert shard_of_doc.setdefault(rows[i]["doc_id"], s) == s  # a document on one shard

    # the same shard per row both ways, as place_documents gives it on the job's counts
    def row_shard(assign):
        return {i: s for s, idx in assign.items() for i in idx}

    assert row_shard(arrival) == row_shard(by_doc)
    docs = list(dict.fromkeys(prefixes))
    n = [prefixes.count(d) for d in docs]
    cost = [len(d) + sum(len(q) for p, q in zip(prefixes, suffixes) if p == d) + k * decode for d, k in zip(docs, n)]
    digests = np.array([prefix_digest(d) for d in docs], np.uint64)
    placement = place_documents(digests, np.array(n), np.array(cost), shards, {}, 50_000)
    want = {d: placement.buckets[b].shard for d, b in zip(docs, placement.bucket_of(digests).tolist())}
    assert all(want[prefixes[i]] == s for i, s in row_shard(arrival).items())
    # arrival: input order per shard; sorted: a document's rows adjacent, in input order,
    # documents by their first row
    for s in shards:
        assert arrival[s] == sorted(arrival[s])
        firsts = {}
        for i in sorted(by_doc[s]):
            firsts.setdefault(prefixes[i], i)
        expect = [i for d in sorted(firsts, key=firsts.get) for i in sorted(by_doc[s]) if prefixes[i] == d]
        assert by_doc[s] == expect
    assert arrival != by_doc  # shuffled input: arrival order interleaves documents
    assert placed_assignment([], [], shards, decode) == {"cpu0": [], "cpu1": []}


def test_standalone_assignment_by_contender():
    from pipeline.bench.contenders import placed_assignment, standalone_assignment

    rows = _doc_rows(10, 2, seed=1)

    def split(row):
        return SimpleNamespace(prefix=row["document"], suffix=row["question"])

    pipeline = SimpleNamespace(
        task=SimpleNamespace(split=split), config=SimpleNamespace(sampling=SimpleNamespace(max_tokens=32))
    )
    shards = ["a", "b"]
    assert standalone_assignment("standalone-rr", shards, rows, None) == {
        "a": list(range(0, 20, 2)),
        "b": list(range(1, 20, 2)),
    }
    prefixes, suffixes = [r["document"] for r in rows], [r["question"] for r in rows]
    # routed: the pipeline's own placement, each shard's rows grouped by document as its answer
    # tasks take them (sorted: the same split, its name on the big job)
    for name, by_doc in (("standalone-arrival", False), ("standalone-sorted", True), ("standalone-routed", True)):
        assert standalone_assignment(name, shards, rows, pipeline) == placed_assignment(
            prefixes, suffixes, shards, 4 * 32, by_document=by_doc
        )
    with pytest.raises(ValueError, match="unknown standalone contender"):
        standalone_assignment("standalone-x", shards, rows, pipeline)


def test_bigjob_report_ratios_side_by_side():
    from pipeline.bench.contenders import RunResult
    from pipeline.bench.report import render_markdown, target_rows
    from pipeline.bench.summary import summarize

    def run(c, pair, wall, cached, finish):
        return RunResult(
            c, "bigjob", pair, wall, 12, 12, 0, 12, 1000, cached, 60, 500, 520, {"cpu0": 6, "cpu1": 6}, finish, {}
        )

    results = [
        run(c, p, wall, cached, {} if c == "pipeline" else {"cpu0": wall - 1, "cpu1": wall})
        for p in (0, 1)
        for c, wall, cached in (
            ("standalone-arrival", 10.0, 100),
            ("standalone-sorted", 4.0, 480),
            ("pipeline", 4.0 if p == 0 else 5.0, 500),
        )
    ]
    summary = summarize(results)
    r = summary["bigjob"]["ratios"]
    assert set(r) == {"pipeline/standalone-arrival", "pipeline/standalone-sorted"}
    assert r["pipeline/standalone-arrival"]["median"] == pytest.approx(2.25)  # median req/s 2.7 over 1.2
    assert r["pipeline/standalone-sorted"]["worst_pair"] == pytest.approx(0.8)
    assert summary["bigjob"]["contenders"]["pipeline"]["finish_spread_s"] is None
    report = {
        "machine": {},
        "options": {"bigjob_docs": 6, "bigjob_questions": 2},
        "total_s": 1.0,
        "engine_start_s": {"pipeline": {}, "standalone": {}},
        "summary": summary,
        "plumbing": None,
    }
    md = render_markdown(report, "python -m pipeline bench --bursts bigjob")
    assert (
        "| pipeline / standalone-arrival | pipeline / standalone-sorted | cached share standalone-arrival | "
        "cached share standalone-sorted | cached share pipeline |" in md
    )
    assert "| 2.250 | 0.900 | 0.100 | 0.480 | 0.500 |" in md
    assert "Big job (`bigjob`: 6 documents × 2 questions" in md
    met = {t["target"]: t["met"] for t in target_rows(report) if t["burst"] == "bigjob"}
    assert (
        met["pipeline / standalone-arrival, median"] is False and met["pipeline / standalone-sorted, median"] is False
    )


def test_write_docs_rewrites_only_the_bench_section(tmp_path):
    from pipeline.bench.report import BEGIN, END, write_docs_section

    page = tmp_path / "BENCHMARKS.md"
    page.write_text("# Benchmarks\n\nHand-written table.\n")
    write_docs_section("# Benchmarks\n\nrun one\n", page)
    write_docs_section("# Benchmarks\n\nrun two\n", page)
    text = page.read_text()
    assert text.startswith("# Benchmarks\n\nHand-written table.\n") and text.count(BEGIN) == text.count(END) == 1
    assert "## The last bench run\n\nrun two" in text and "run one" not in text
