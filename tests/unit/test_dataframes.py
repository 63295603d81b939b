"""``Pipeline.map_dataframe`` with the null engine: output aligned with the input's index and
partitions, pandas input, up-front errors, and a Dask DataFrame from and to an object store."""
import dask.dataframe as dd
import pandas as pd
import pytest

from pipeline import Pipeline, load_config
from pipeline.bench.workloads import document_questions
from pipeline.client.dataframes import DataFrameInputError


@pytest.fixture(scope="module")
def null_pipeline():
    config = load_config().replace(scheduler={"dashboard_address": None},
                                   intake={"batch_size": 8, "queue_per_shard": 16, "read_ahead_rows": 40})
    with Pipeline(config, engine="null") as p:
        yield p


def _frame(n_docs=12, per_doc=4):
    rows = document_questions(n_docs, per_doc, seed=4, order="shuffled")
    frame = pd.DataFrame(rows)
    frame.index = pd.Index([f"k{(i * 13) % len(frame):03d}" for i in range(len(frame))])
    return frame


def test_output_partitions_and_index_match_the_input(null_pipeline):
    frame = _frame()
    ddf = dd.from_pandas(frame, npartitions=5, sort=False)
    answers = null_pipeline.map_dataframe(ddf)
    assert answers.npartitions == ddf.npartitions and answers.divisions == ddf.divisions
    for i in range(ddf.npartitions):
        assert list(answers.get_partition(i).compute().index) == list(ddf.get_partition(i).compute().index)
    out = answers.compute()
    assert out["error"].isna().all() and (out["prompt_tokens"] > 0).all()
    # every question on one document went to one shard, whichever partition it was in
    shards = frame[["doc_id"]].join(out["shard"]).groupby("doc_id")["shard"].nunique()
    assert (shards == 1).all()


def test_pandas_input_bad_rows_and_missing_columns(null_pipeline, monkeypatch):
    frame = _frame(3, 2)
    frame.loc[frame.index[1], "question"] = None
    totals, stream = [], null_pipeline.stream

    def watched_stream(rows, **kwargs):   # the job's row count, as the dashboard's progress gets it
        totals.append(kwargs.get("rows_total"))
        return stream(rows, **kwargs)

    monkeypatch.setattr(null_pipeline, "stream", watched_stream)
    out = null_pipeline.map_dataframe(frame).compute()
    assert totals == [len(frame)]   # known up front for a pandas frame
    assert list(out.index) == list(frame.index)
    assert out["error"].iloc[1] == "input: question is null" and out["error"].drop(frame.index[1]).isna().all()
    with pytest.raises(DataFrameInputError, match="lacks required column"):
        null_pipeline.map_dataframe(frame.drop(columns=["question"]))
    tpl = null_pipeline.map_dataframe(frame.rename(columns={"question": "q"}),
                                      prompt={"template": "{document}\n\nQ: {q}"}, sampling={"max_tokens": 4})
    assert tpl.compute()["error"].iloc[1] == "input: q is null"
