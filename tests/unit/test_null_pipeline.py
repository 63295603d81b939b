"""The whole client/Dask/worker path with the null engine (no vLLM): plumbing only."""
import pytest

from pipeline import Pipeline, load_config
from pipeline.workloads import document_questions


@pytest.fixture(scope="module")
def null_pipeline():
    config = load_config().replace(scheduler={"dashboard_address": None},
                                   intake={"read_ahead_rows": 50, "batch_size": 8, "queue_per_shard": 16})
    with Pipeline(config, engine="null") as p:
        yield p


def test_every_row_once_with_its_id_in_order(null_pipeline):
    rows = document_questions(30, 4, seed=1, order="shuffled")
    results = null_pipeline.run(rows)
    assert [r.id for r in results] == [row["id"] for row in rows]
    assert all(r.error is None and r.shard in ("cpu0", "cpu1") for r in results)


def test_generator_input_is_read_ahead_in_a_bounded_window(null_pipeline):
    pulled = 0
    high_water = 0
    answered = 0

    def rows():
        nonlocal pulled
        for row in document_questions(100, 3, seed=2, order="shuffled"):
            pulled += 1
            yield row

    for _ in null_pipeline.stream(rows()):
        answered += 1
        high_water = max(high_water, pulled - answered)
    assert answered == pulled == 300
    # unbound (50) + bound-but-unanswered (2 shards x 16, a group may overshoot by a
    # batch) + one result batch being yielded: far below the 300 rows of the input
    assert high_water <= 50 + 2 * (16 + 8) + 8


def test_rows_without_id_get_their_position_and_bad_rows_an_error(null_pipeline):
    rows = [{"document": "d1", "question": "q1"}, {"document": None, "question": "q"},
            {"document": "d1", "question": 7}, {"document": "d2", "question": "q2"}]
    results = null_pipeline.run(rows)
    assert [r.id for r in results] == [0, 1, 2, 3]
    assert [r.error for r in results] == [None, "input: document is null", "input: question is not text (got int)", None]


def test_documents_stay_on_one_shard(null_pipeline):
    rows = document_questions(20, 5, seed=3, order="shuffled")
    results = null_pipeline.run(rows)
    shards = {}
    for row, r in zip(rows, results):
        shards.setdefault(row["doc_id"], set()).add(r.shard)
    assert all(len(s) == 1 for s in shards.values())
    assert {s for v in shards.values() for s in v} == {"cpu0", "cpu1"}
