import gc

from pipeline.worker.gcstats import GcPauses


def test_records_collections_with_generation_and_resets():
    pauses = GcPauses().install()
    try:
        pauses.reset()
        gc.collect(1)
        gc.collect(2)
        s = pauses.summary()
        assert s["collections"] >= 2 and s["max_ms"] >= s["p99_ms"] >= 0 and s["max_cpu_ms"] >= 0
        assert {1, 2} <= set(s["per_generation"])
        pauses.reset()
        assert pauses.summary()["collections"] == 0
    finally:
        gc.callbacks.remove(pauses._callback)
