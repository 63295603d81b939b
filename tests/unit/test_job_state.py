"""The job state machine driven by synthetic events, in milliseconds: no Dask, no engine."""

from pipeline.client.dispatch import Dispatcher
from pipeline.client.job_state import Cancel, Emit, JobState, ReadRow, Submit
from pipeline.client.router import Prefix, PrefixRouter
from pipeline.results import ErrorKind, RowResult

DOCS = {f"doc{d}": Prefix.of([d * 100 + i for i in range(64)], 16) for d in range(4)}


def new_state(shards=("s0", "s1"), batch_size=4, max_attempts=3, window=1000, queue_per_shard=64, worker_slots=0):
    router = PrefixRouter(list(shards), block_size=16)
    return JobState("job", Dispatcher(router, batch_size, queue_per_shard=queue_per_shard, worker_slots=worker_slots),
                    window, max_attempts)


def rows(n_docs=4, per_doc=2, bad=()):
    out = []
    for d in range(n_docs):
        for q in range(per_doc):
            i = d * per_doc + q
            out.append(ReadRow(i, f"id{i}", error="question is null") if i in bad
                       else ReadRow(i, f"id{i}", f"doc{d}", f"q{q}"))
    return out


def submits(instructions):
    return [i for i in instructions if isinstance(i, Submit)]


def emitted(instructions):
    return [r for i in instructions if isinstance(i, Emit) for r in i.rows]


def result(index, shard, answer="ok"):
    return RowResult(index, answer=answer, prompt_tokens=10, completion_tokens=1, shard=shard, latency_s=0.1)


def answer(state, sub, answer="ok"):
    return state.batch_done(sub.batch_id, [result(i, sub.shard, answer) for items in sub.groups.values()
                                           for i, _ in items])


def run_to_end(state, pending):
    """Answer every submitted batch until nothing is in flight; returns emitted rows."""
    out = []
    while pending:
        sub = pending.pop(0)
        if sub.batch_id in state.in_flight:
            ins = answer(state, sub)
            out += emitted(ins)
            pending += submits(ins)
    return out


def test_every_row_is_emitted_once_with_its_id_and_input_errors_at_once():
    state = new_state()
    first = state.rows_read(rows(bad={3}), DOCS) + state.input_ended()
    early = emitted(first)
    assert [(r.index, r.id, r.error) for r in early] == [(3, "id3", "input: question is null")]
    out = early + run_to_end(state, submits(first))
    assert sorted(r.index for r in out) == list(range(8)) and len(out) == 8
    assert all(r.id == f"id{r.index}" for r in out)
    assert state.finished and state.report.rows == 8 and not state.ids and not state.attempts


def test_a_documents_questions_travel_together_to_one_shard():
    state = new_state(batch_size=8)
    subs = submits(state.rows_read(rows(per_doc=3), DOCS) + state.input_ended())
    where = {}
    for s in subs:
        for prefix in s.groups:
            assert where.setdefault(prefix, s.shard) == s.shard
    assert set(where) == set(DOCS)


def test_a_shard_gone_with_batches_in_flight_cancels_them_and_reroutes_their_rows():
    state = new_state()
    subs = submits(state.rows_read(rows(), DOCS) + state.input_ended())
    on_s1 = [s for s in subs if s.shard == "s1"]
    assert on_s1
    ins = state.shard_gone("s1")
    assert {i.batch_id for i in ins if isinstance(i, Cancel)} == {s.batch_id for s in on_s1}
    again = submits(ins)
    assert again and all(s.shard == "s0" for s in again)
    rerouted = sorted(i for s in again for items in s.groups.values() for i, _ in items)
    assert rerouted == sorted(i for s in on_s1 for items in s.groups.values() for i, _ in items)
    assert state.report.rows_rerouted == len(rerouted)
    out = run_to_end(state, [s for s in subs if s.shard == "s0"] + again)
    assert sorted(r.index for r in out) == list(range(8)) and all(r.shard == "s0" for r in out)


def test_a_late_result_after_a_reroute_is_dropped_and_counted():
    state = new_state()
    subs = submits(state.rows_read(rows(), DOCS) + state.input_ended())
    late = next(s for s in subs if s.shard == "s1")
    again = submits(state.shard_gone("s1"))
    out = run_to_end(state, [s for s in subs if s.shard == "s0"] + again)
    assert emitted(answer(state, late)) == []           # the cancelled batch answers after all
    assert sorted(r.index for r in out) == list(range(8))
    n = sum(len(items) for items in late.groups.values())
    assert state.report.duplicates_dropped == n


def test_the_last_live_shard_is_never_given_up():
    state = new_state()
    state.rows_read(rows(), DOCS)
    state.shard_gone("s1")
    assert state.shard_gone("s0") == [] and state.router.live_shards == ["s0"]


def test_killed_worker_rows_fail_without_being_sent_again():
    state = new_state()
    subs = submits(state.rows_read(rows(n_docs=1), DOCS) + state.input_ended())
    sub = subs[0]
    ins = state.batch_failed(sub.batch_id, "KilledWorker: ...", killed_worker=True)
    failed = emitted(ins)
    assert not submits(ins)
    assert sorted(r.index for r in failed) == sorted(i for items in sub.groups.values() for i, _ in items)
    assert all(r.error == "worker: KilledWorker: ..." for r in failed)
    assert state.report.rows_failed == len(failed) and state.report.batches_failed == 1


def test_a_row_is_sent_at_most_max_attempts_times_then_fails():
    state = new_state(max_attempts=3)
    pending = submits(state.rows_read(rows(n_docs=1, per_doc=1), DOCS) + state.input_ended())
    sends = 0
    out = []
    while pending:
        sub = pending.pop()
        sends += 1
        ins = state.batch_failed(sub.batch_id, "EngineDead: core died", engine_dead=True)
        pending += submits(ins)
        out += emitted(ins)
    assert sends == 3
    assert [(r.index, r.error) for r in out] == [(0, "worker: EngineDead: core died")]
    assert state.finished and state.report.rows_rerouted == 2


def test_an_engine_that_died_sends_its_batch_again_and_the_router_forgets_that_shard():
    state = new_state()
    sub, = submits(state.rows_read(rows(n_docs=1), DOCS) + state.input_ended())
    forgotten = []
    state.router.forget_shard = lambda shard, real=state.router.forget_shard: (forgotten.append(shard), real(shard))
    again = submits(state.batch_failed(sub.batch_id, "EngineDead: core died", engine_dead=True))
    assert forgotten == [sub.shard]
    assert [i for s in again for items in s.groups.values() for i, _ in items] == \
        [i for items in sub.groups.values() for i, _ in items]
    assert state.report.batches_failed == 1


def test_read_ahead_is_bounded_by_the_window_and_refilled_in_large_chunks():
    # the shards are full (no room in their queues): rows read stay pending
    assert new_state(window=8, queue_per_shard=0).rows_wanted == 8
    for waiting, wanted in ((8, 0), (5, 0), (4, 4), (1, 7)):   # more than half the window waits: none
        state = new_state(window=8, queue_per_shard=0)
        assert submits(state.rows_read(rows()[:waiting], DOCS)) == []
        assert state.rows_wanted == wanted, waiting
    state.input_ended()
    assert state.rows_wanted == 0


def test_read_ahead_is_bounded_by_the_characters_it_holds_each_document_once():
    state = new_state(window=1000)
    state.read_ahead_chars = 100
    state.dispatcher.queue_per_shard = 0   # the shards are full: rows stay pending
    assert state.rows_wanted == 1000       # nothing read yet: no characters per row known
    state.rows_read(rows(n_docs=1, per_doc=2), DOCS)    # "doc0" once + "q0" + "q1": 8 characters
    assert state.dispatcher.pending_chars == 8
    assert state.rows_wanted == (100 - 8) // 4           # at 4 characters per row so far
    state.rows_read([ReadRow(2, "id2", "doc1" * 20, "q")], {"doc1" * 20: DOCS["doc1"]})
    assert state.dispatcher.pending_chars == 89 and state.rows_wanted == 0   # over half the characters wait
    state.dispatcher.queue_per_shard = 64
    state.input_ended()                     # binds everything: nothing waits
    assert state.dispatcher.pending_chars == 0 and state.dispatcher.pending_rows == 0


def test_prefix_tokens_are_held_only_while_a_row_needs_them():
    state = new_state(batch_size=2)
    pending = submits(state.rows_read(rows(), DOCS) + state.input_ended())
    unanswered = {r.index: f"doc{r.index // 2}" for r in rows()}   # row -> its document (two rows each)
    assert all(state.holds(d) for d in DOCS)
    while pending:
        sub = pending.pop(0)
        ins = answer(state, sub)
        for r in emitted(ins):
            del unanswered[r.index]
        pending += submits(ins)
        assert {d for d in DOCS if state.holds(d)} == set(unanswered.values())
    assert unanswered == {} and not any(state.holds(d) for d in DOCS)


def test_the_report_counts_rows_read_the_total_once_known_and_rows_with_an_error():
    state = new_state()
    first = state.rows_read(rows(bad={3}), DOCS)
    assert state.report.rows_read == 8 and state.report.rows_total is None   # more may come
    assert state.report.errors == 1                                          # the input error, answered at once
    pending = submits(first + state.input_ended())
    assert state.report.rows_total == 8
    sub = pending.pop(0)
    ins = state.batch_done(sub.batch_id, [RowResult.failed(i, ErrorKind.ENGINE, "ValueError: x", shard=sub.shard)
                                          for items in sub.groups.values() for i, _ in items])
    n = sum(len(items) for items in sub.groups.values())
    assert state.report.errors == 1 + n
    assert state.report.errors_by_kind == {"input: question is null": 1, "engine: ValueError": n}
    run_to_end(state, pending + submits(ins))
    d = state.report.as_dict()
    assert (d["rows"], d["rows_read"], d["rows_total"], d["rows_with_error"]) == (8, 8, 8, 1 + n)


def test_the_state_machine_imports_no_dask():
    import subprocess
    import sys

    code = ("import sys, pipeline.client.job_state; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_last_rows_read_are_bound_at_once_when_they_fit_the_queues_together():
    # doc0's three questions fill s0's queue (3) while s0 is the least loaded by work
    burst = [ReadRow(i, f"id{i}", "doc0", f"q{i}") for i in range(3)] + \
            [ReadRow(3 + d, f"id{3 + d}", f"doc{d + 1}", "q") for d in range(3)]
    more_to_come = new_state(queue_per_shard=3, batch_size=100)
    bound = [i for sub in submits(more_to_come.rows_read(burst, DOCS)) for items in sub.groups.values()
             for i, _ in items]
    assert len(bound) == 5 and more_to_come.dispatcher.pending_rows == 1
    # the same rows as the input's last: all six go now, and each is answered once
    last = new_state(queue_per_shard=3, batch_size=100)
    subs = submits(last.rows_read(burst, DOCS, last=True))
    assert sorted(i for sub in subs for items in sub.groups.values() for i, _ in items) == list(range(6))
    assert last.rows_wanted == 0 and last.dispatcher.pending_rows == 0
    assert sorted(r.index for r in run_to_end(last, subs)) == list(range(6)) and last.finished


def test_the_last_rows_fill_the_slots_the_shards_batches_running_leave():
    # a worker running 3 batches at once already runs 2 of this job's: the last 8 rows go in one
    state = new_state(shards=("s0",), batch_size=2, worker_slots=3)
    read = rows(per_doc=3)
    first = submits(state.rows_read(read[:4], DOCS))
    assert len(first) == 2 and sum(len(items) for sub in first for items in sub.groups.values()) == 4
    last = submits(state.rows_read(read[4:], DOCS, last=True))
    assert len(last) == 1
    assert sorted(i for sub in last for items in sub.groups.values() for i, _ in items) == list(range(4, 12))
    assert sorted(r.index for r in run_to_end(state, first + last)) == list(range(12)) and state.finished
