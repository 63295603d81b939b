"""A tiny `bench` run: every contender answers every request and the report is well formed.
(Real figures come from full runs of `python -m pipeline bench`, never from tests.)"""

import json

from pipeline.bench.report import write_report
from pipeline.bench.run import CONTENDERS, BenchOptions, run_bench


def test_bench_smoke(pipeline, tmp_path):
    opts = BenchOptions(pairs=1, docs=4, questions_per_doc=2, skewed_requests=8, filler_sentences=4, null_questions=400)
    report = run_bench(pipeline.config, opts, pipeline=pipeline, progress=False)
    paths = write_report(report, tmp_path, "python -m pipeline bench (smoke)")

    runs = report["runs"]
    assert sorted((r["burst"], r["contender"]) for r in runs) == sorted(
        (b, c) for b in ("no_reuse", "reuse", "skewed") for c in CONTENDERS
    )
    expected = {"no_reuse": 4, "reuse": 8, "skewed": 8}
    for r in runs:
        assert r["requests"] == expected[r["burst"]]
        assert r["answered"] == r["requests"] and r["errors"] == 0, r
        assert sum(r["per_shard"].values()) == r["requests"]
        assert r["completion_tokens"] > 0 and r["wall_s"] > 0
    for burst, s in report["summary"].items():
        assert set(s["contenders"]) == set(CONTENDERS)
        assert set(s["ratios"]) == {"pipeline/standalone-routed", "pipeline/standalone-rr"}
    assert report["plumbing"]["questions"] == 400

    # The reference is plain vLLM started clean: its engine processes' environments (from
    # /proc) match the pipeline's, PIPELINE_* aside, and neither carries Dask's variables.
    envs = report["engine_env"]
    assert set(envs) == set(pipeline.config.shard_names)
    for shard, procs in envs.items():
        assert any(n.startswith("VLLM::EngineCore") for n in procs), procs.keys()
        for name, p in procs.items():
            assert p["pipeline_pid"] and p["standalone_pid"], (shard, name)
            # pytest names the running test phase in the environment: the session's pipeline
            # started in another phase than this test's reference.
            differ = {k: v for k, v in p["differ"].items() if k != "PYTEST_CURRENT_TEST"}
            assert not (p["only_pipeline"] or p["only_standalone"] or differ), (shard, name, p)
            assert p["watched"]["MALLOC_TRIM_THRESHOLD_"] == [None, None]

    # ... and both engines run with the settings vLLM fills in by itself alike (its offline
    # LLM class's defaults: the token budget of a step among them), but one: the pipeline's
    # engines schedule by priority (jobs sharing an engine take turns), plain vLLM first come
    # first served. The report shows both.
    settings = report["engine_settings"]
    assert set(settings["pipeline"]) == set(settings["standalone"]) == set(pipeline.config.shard_names)
    for shard in settings["pipeline"]:
        ours, plain = dict(settings["pipeline"][shard]), dict(settings["standalone"][shard])
        assert (ours.pop("policy"), plain.pop("policy")) == ("priority", "fcfs"), shard
        assert ours == plain, shard
        assert settings["pipeline"][shard]["max_num_batched_tokens"] > 0

    loaded = json.loads(paths["json"].read_text())
    assert loaded["summary"].keys() == report["summary"].keys()
    md = paths["markdown"].read_text()
    for c in CONTENDERS:
        assert f"| reuse | {c} |" in md
    assert "questions/s" in md and "| target |" in md
    assert "Engine environments" in md and "| cpu0 | VLLM::EngineCore |" in md
    assert "| cpu0 | max_num_batched_tokens |" in md
    assert paths["chart"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
