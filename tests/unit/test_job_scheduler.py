"""The CPU engines' scheduler (pipeline/worker/job_scheduler.py): its decision before each
step, on vLLM's own waiting queue, without an engine (vLLM's preemption replaced by its effect
on the queues). Its effect on a real engine: tests/engine/test_fair_share_engine.py."""

from dataclasses import dataclass, field
from itertools import count

import pytest
from vllm.v1.core.sched.request_queue import PriorityRequestQueue
from vllm.v1.core.sched.scheduler import Scheduler

from pipeline.worker.job_scheduler import JobFairScheduler, job_of

BIG, SMALL = "pipeline-job-0123456789ab", "pipeline-job-ba9876543210"
_arrivals = count()


@dataclass(eq=False)
class Request:
    request_id: str
    priority: int
    arrival_time: float = field(default_factory=lambda: float(next(_arrivals)))

    def __lt__(self, other):
        return (self.priority, self.arrival_time) < (other.priority, other.arrival_time)


def requests(job: str, n: int, first: int = 0) -> list[Request]:
    return [Request(f"{job}-b0-{first + k}", first + k) for k in range(n)]


def scheduler(running: list, waiting: list) -> JobFairScheduler:
    """The scheduler's state as vLLM keeps it: 64 seats, ``running`` seated, ``waiting`` queued."""
    s = object.__new__(JobFairScheduler)
    s.max_num_running_reqs = s.max_num_active_reqs = s._seats = 64
    s._small, s._reserve = 16, 4
    s.running, s.waiting = list(running), PriorityRequestQueue()
    for r in waiting:
        s.waiting.add_request(r)
    s.preempted = []

    def preempt(request, timestamp):  # (vLLM's: frees its blocks, keeps its output, re-queues it)
        s.preempted.append(request)
        s.waiting.prepend_request(request)

    s._preempt_request = preempt
    return s


def test_a_request_id_names_its_job():
    assert job_of(f"{BIG}-b3-1024") == BIG
    assert job_of(f"{BIG}-batch-7-12") == BIG
    assert job_of("bench-17") == "bench-17"


def test_one_job_is_scheduled_as_vllm_schedules_it():
    big = requests(BIG, 96)
    s = scheduler(big[:64], big[64:])
    assert s._make_way() == [] and not s.preempted
    assert s.max_num_active_reqs == 64 and len(s.waiting) == 32


def test_a_small_job_beside_a_big_one_gets_the_engine_but_a_few_seats():
    big, small = requests(BIG, 96), requests(SMALL, 8)
    s = scheduler(big[:64], big[64:] + small)
    held = s._make_way()
    # the big job keeps its 4 earliest seated requests; its 60 latest step aside
    assert s.running == big[:4]
    assert s.preempted == sorted(big[4:64], key=lambda r: r.arrival_time)
    # only the small job's requests wait for this step, with seats for all of them
    assert list(s.waiting) == small
    assert s.max_num_active_reqs == 8 + 4
    assert set(held) == set(big[4:])


def test_jobs_of_like_size_are_left_as_they_are():
    a, b = requests(BIG, 40), requests(SMALL, 40)
    s = scheduler(a[:32] + b[:32], a[32:] + b[32:])
    assert s._make_way() == [] and not s.preempted


def test_the_held_requests_come_back_after_the_step(monkeypatch):
    big, small = requests(BIG, 70), requests(SMALL, 2)
    s = scheduler(big[:64], big[64:] + small)
    seen = {}

    def step(self, *args, **kwargs):
        seen["waiting"], seen["seats"] = list(self.waiting), self.max_num_active_reqs
        return "output"

    monkeypatch.setattr(Scheduler, "schedule", step)
    assert s.schedule() == "output"
    assert seen == {"waiting": small, "seats": 6}
    assert sorted(r.request_id for r in s.waiting) == sorted(r.request_id for r in big[4:] + small)
    assert s.max_num_active_reqs == 64


@pytest.mark.parametrize("small_rows", [16, 17])
def test_a_job_counts_as_small_up_to_a_quarter_of_the_seats(small_rows):
    big, small = requests(BIG, 80), requests(SMALL, small_rows)
    s = scheduler(big[:64], big[64:] + small)
    s._make_way()
    assert bool(s.preempted) is (small_rows <= 16)
