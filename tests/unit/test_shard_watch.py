"""``recovery.rejoin_timeout_s`` counts until a worker that can answer, not one that has joined
(pipeline/jobs/recovery.py): a fake scheduler and a fake clock."""

from types import SimpleNamespace

from pipeline.jobs.recovery import ShardWatch
from pipeline.summary import GONE, LOST, REJOINED


class FakeClient:
    """The scheduler's worker list (``workers``: address -> shard resource) and each worker's
    engine phase (``phases``), as ``current_workers`` and ``client.run(engine_phase)`` see them."""

    def __init__(self, workers: dict, phases: dict):
        self.workers, self.phases = workers, phases
        self.scheduler = SimpleNamespace(identity=None)
        self.asked: list = []

    def sync(self, method, n_workers):
        return {"workers": {a: {"resources": {res: 1}} for a, res in self.workers.items()}}

    def run(self, function, workers, on_error):
        self.asked += workers
        return {a: {"phase": self.phases[a]} for a in workers if a in self.workers}


def events(watch, now):
    return [(e.kind, e.shard, e.worker) for e in watch.poll(now)]


def test_a_restarted_worker_whose_engine_starts_past_the_timeout_is_gone_then_rejoins():
    """A nanny restarts a SIGKILLed worker at once; it registers, then builds its engine for
    68 s. The shard is gone at 60 s (its rows go to the others) and rejoins at 68 s (the watch
    once saw it rejoin at 1 s and never fired 'gone')."""
    client = FakeClient({"w-a": "shard-a", "w-b": "shard-b"}, {"w-a": "ready", "w-b": "ready"})
    watch = ShardWatch(client, {"a": "shard-a", "b": "shard-b"}, interval_s=0.5, rejoin_timeout_s=60)
    assert events(watch, 0.5) == [] and client.asked == []  # (the workers at the start: not asked)
    del client.workers["w-a"]
    client.workers["w-a2"] = "shard-a"
    client.phases["w-a2"] = "starting"
    assert events(watch, 1.0) == [(LOST, "a", "w-a")]
    assert events(watch, 30.0) == []
    assert watch.workers == {"b": "w-b"}  # (no bucket moves to a shard that cannot answer)
    assert events(watch, 61.0) == [(GONE, "a", "w-a")]
    assert events(watch, 65.0) == []
    client.phases["w-a2"] = "ready"
    assert events(watch, 68.0) == [(REJOINED, "a", "w-a2")]
    assert watch.workers == {"a": "w-a2", "b": "w-b"} and watch.gone == set()
    asked = len(client.asked)
    assert events(watch, 70.0) == [] and len(client.asked) == asked  # ready: not asked again


def test_an_engine_ready_within_the_timeout_rejoins_without_gone():
    client = FakeClient({"w-a": "shard-a"}, {"w-a": "ready"})
    watch = ShardWatch(client, {"a": "shard-a"}, interval_s=0.5, rejoin_timeout_s=60)
    del client.workers["w-a"]
    assert events(watch, 1.0) == [(LOST, "a", "w-a")]
    client.workers["w-a2"], client.phases["w-a2"] = "shard-a", "waiting"  # joined; no plugin yet
    assert events(watch, 3.0) == []
    client.phases["w-a2"] = "ready"
    assert events(watch, 20.0) == [(REJOINED, "a", "w-a2")]
    assert events(watch, 90.0) == []
