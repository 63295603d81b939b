"""Jobs sharing one engine: who goes next (pipeline/worker/admission.py), without a cluster."""

import asyncio

import pyarrow as pa

from pipeline.config import load_config
from pipeline.worker.admission import FairAdmission, TokenGate


async def _take(admission: FairAdmission, job: str, log: list) -> None:
    priority = await admission.acquire(job)
    log.append((job, priority))


def test_one_job_is_admitted_first_come_first_served_with_rising_priorities():
    async def run():
        admission, log = FairAdmission(2), []
        waiters = [asyncio.ensure_future(_take(admission, "a", log)) for _ in range(6)]
        await asyncio.sleep(0)
        for _ in range(4):
            admission.release("a")
            await asyncio.sleep(0)
        await asyncio.gather(*waiters)
        return log

    assert asyncio.run(run()) == [("a", p) for p in range(6)]


def test_a_job_that_arrives_beside_a_queued_one_goes_in_at_once_up_to_its_share_and_ranks_first():
    """A big job fills the engine's 4 places and queues 50 more; a small job's first 2 requests
    (its share: 4 places / 2 jobs) go in at once, over the limit, without waiting for a big
    request to end; its 3rd takes the first place that frees below the limit, before the big
    job's 5th. Its priorities are below every one of the big job's (vLLM seats them first)."""

    async def run():
        admission, log = FairAdmission(4), []
        big = [asyncio.ensure_future(_take(admission, "big", log)) for _ in range(54)]
        await asyncio.sleep(0)
        small = [asyncio.ensure_future(_take(admission, "small", log)) for _ in range(3)]
        await asyncio.sleep(0)
        steps = [list(log)]
        for _ in range(4):
            admission.release("big")
            await asyncio.sleep(0)
            steps.append(list(log))
        for t in big + small:
            t.cancel()
        return steps, admission.in_engine

    steps, in_engine = asyncio.run(run())
    assert steps[0] == [("big", p) for p in range(4)] + [("small", 0), ("small", 1)]
    assert steps[1] == steps[2] == steps[0]  # 5, then 4 in the engine: nothing handed on
    assert steps[3][:7] == steps[0] + [("small", 2)]  # 3: below the limit, the small job's 3rd
    assert in_engine <= 4 + 2


def test_two_long_jobs_take_turns_once_the_later_one_has_caught_up():
    async def run():
        admission, log = FairAdmission(1), []
        first = [asyncio.ensure_future(_take(admission, "a", log)) for _ in range(10)]
        await asyncio.sleep(0)
        admission.release("a")  # a has had 2 admitted
        await asyncio.sleep(0)
        second = [asyncio.ensure_future(_take(admission, "b", log)) for _ in range(10)]
        await asyncio.sleep(0)
        for _ in range(8):
            admission.release(log[-1][0])
            await asyncio.sleep(0)
        for t in first + second:
            t.cancel()
        return [job for job, _ in log]

    assert asyncio.run(run()) == ["a", "a", "b", "b", "a", "b", "a", "b", "a", "b"]


def test_a_cancelled_request_gives_its_place_back_and_nothing_leaks():
    async def run():
        admission, log = FairAdmission(1), []
        held = await admission.acquire("a")
        waiting = asyncio.ensure_future(_take(admission, "b", log))
        later = asyncio.ensure_future(_take(admission, "c", log))
        await asyncio.sleep(0)
        waiting.cancel()  # gone while it waits: never admitted
        await asyncio.sleep(0)
        admission.release("a")  # the place goes to c
        await later
        admission.release("c")
        return held, log, admission.in_engine, admission._active

    held, log, in_engine, active = asyncio.run(run())
    assert held == 0 and log == [("c", 0)]
    assert in_engine == 0 and not active


def test_the_token_gate_lets_a_new_job_start_a_document_while_another_fills_it():
    """Budget 100: a job holding nothing always starts a document; past the budget, a job may go
    while it holds less than its share (100 / the jobs holding or asking)."""

    async def run():
        gate, steps = TokenGate(100), []

        async def settle():
            for _ in range(3):
                await asyncio.sleep(0)
            steps.append((big_more.done(), small_more.done() if small_more else None))

        await gate.acquire(60, "big")
        await gate.acquire(30, "big")
        big_more = asyncio.ensure_future(gate.acquire(50, "big"))  # 140 > 100: waits
        small_more = None
        await asyncio.wait_for(gate.acquire(50, "small"), 1)  # holds nothing: goes at once
        small_more = asyncio.ensure_future(gate.acquire(40, "small"))  # over the budget and its share: waits
        await settle()
        await gate.release(50, "small")  # small holds nothing again: its next document goes
        await settle()
        await gate.release(60, "big")  # 70 held; big's 50 more is over the budget and over its share
        await settle()
        await gate.release(40, "small")  # 30 held: 80 fits
        await settle()
        return steps, gate.held

    steps, held = asyncio.run(run())
    assert steps == [(False, False), (False, True), (False, True), (True, True)]
    assert held == 80


def test_a_small_job_beside_a_big_one_on_one_engine_is_answered_before_the_big_ones_queued_rows():
    """Two buckets of two jobs on one shard's plugin, a slow fake engine: the small job, started
    while the big one has its window of rows waiting for the engine, is admitted before those
    waiting rows."""
    from pipeline.worker import metrics
    from pipeline.worker.fake_engine import FakeEngine
    from pipeline.worker.gcstats import GcPauses
    from pipeline.worker.plugin import EnginePlugin

    class Logged(FakeEngine):
        def __init__(self):
            super().__init__(latency_s=0.01)
            self.done: list[str] = []

        async def generate(self, prompt_ids, request_id, sampling, priority=0):
            try:
                return await super().generate(prompt_ids, request_id, sampling)
            finally:
                self.done.append(request_id.split("-")[0])

    def table(n, digest, first):
        return pa.table(
            {
                "position": pa.array(range(first, first + n), pa.int64()),
                "digest": pa.array([digest] * n, pa.uint64()),
                "prefix": pa.array([f"doc {digest} "] * n, pa.large_string()),
                "suffix": pa.array([f"q{i}" for i in range(n)], pa.large_string()),
            }
        )

    config = load_config().replace(intake={"max_in_flight": 4})
    plugin = EnginePlugin(config, "x", "fake")
    plugin.engine, plugin.shard, plugin.prefixes, plugin.token_gate = Logged(), "cpu0", None, None
    plugin.metrics = metrics.ShardMetrics("cpu0", GcPauses())
    sampling = config.sampling.as_sampling(0)

    async def run():
        plugin._intake = FairAdmission(config.intake.max_in_flight)
        big = asyncio.ensure_future(plugin.answer_grouped(table(48, 1, 0), "big", sampling, False, job="big"))
        await asyncio.sleep(0.015)  # the big job is answering: 4 rows in the engine, 4 more waiting
        arrived = len(plugin.engine.done)
        small = await plugin.answer_grouped(table(4, 2, 100), "small", sampling, False, job="small")
        await big
        return small, arrived

    small, arrived = asyncio.run(run())
    assert [r.index for r in small] == [100, 101, 102, 103] and all(r.error is None for r in small)
    order = plugin.engine.done
    last_small = max(i for i, job in enumerate(order) if job == "small")
    # the small job's first requests (its share: 4 places / 2 jobs) went in at once: only the big
    # job's requests already in the engine end before them (first come, first served: its 44
    # waiting ones too); its others took the next places, beside at most a share of the big job's
    share = config.intake.max_in_flight // 2
    assert order[: order.index("small")].count("big") <= arrived + config.intake.max_in_flight, order
    assert order[:last_small].count("big") <= arrived + config.intake.max_in_flight + share, order
