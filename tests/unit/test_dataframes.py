"""``Pipeline.map_dataframe`` with the fake engine: output aligned with the input's index and
partitions, pandas input, up-front errors, and a Dask DataFrame from and to an object store."""

import dask
import dask.dataframe as dd
import pandas as pd
import pytest

from pipeline import Pipeline, load_config
from pipeline.bench.workloads import document_questions
from pipeline.client.dataframes import DataFrameInputError


@pytest.fixture(scope="module")
def null_pipeline():
    config = load_config().replace(scheduler={"dashboard_address": None}, intake={"read_ahead_rows": 40})
    with Pipeline(config, engine="fake") as p:
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


def _job_view(pipeline) -> dict:
    """The last job's figures as the dashboard's job plot gets them."""
    from pipeline.names import VIEW_METADATA_KEY

    return pipeline.client.get_metadata(VIEW_METADATA_KEY)["job"]


def test_pandas_input_bad_rows_and_missing_columns(null_pipeline):
    frame = _frame(3, 2)
    frame.loc[frame.index[1], "question"] = None
    out = null_pipeline.map_dataframe(frame).compute()
    assert _job_view(null_pipeline)["rows_total"] == len(frame)
    assert list(out.index) == list(frame.index)
    assert out["error"].iloc[1] == "input: question is null" and out["error"].drop(frame.index[1]).isna().all()
    with pytest.raises(DataFrameInputError, match="lacks required column"):
        null_pipeline.map_dataframe(frame.drop(columns=["question"]))
    tpl = null_pipeline.map_dataframe(
        frame.rename(columns={"question": "q"}), prompt={"template": "{document}\n\nQ: {q}"}, sampling={"max_tokens": 4}
    )
    assert tpl.compute()["error"].iloc[1] == "input: q is null"


def _values(column) -> list:
    return [None if pd.isna(v) else v for v in column]


def _run(pipeline, frame, **options) -> dict:
    """``Pipeline.run`` on the frame's rows: each result field's values in row order."""
    rows = frame.astype(object).where(frame.notna(), None).to_dict("records")  # (pandas' NaN: None)
    results = pipeline.run(rows, **options)
    return {
        name: [getattr(r, name) for r in results]
        for name in ("answer", "error", "prompt_tokens", "completion_tokens", "finish_reason")
    }


def test_a_dataframe_gives_pipeline_runs_rows_and_no_row_passes_the_client(null_pipeline, monkeypatch):
    frame = _frame(10, 3)
    frame.loc[frame.index[4], "document"] = "   "  # an input error, kept on its row
    frame["max_tokens"] = [3 + i % 4 for i in range(len(frame))]  # a row's own sampling: the per-row path
    ddf = dd.from_pandas(frame, npartitions=4, sort=False)

    def no_rows_through_the_client(*args, **kwargs):
        raise AssertionError("the cluster path sent rows through Pipeline.stream")

    monkeypatch.setattr(null_pipeline, "stream", no_rows_through_the_client)
    on_cluster = null_pipeline.map_dataframe(ddf).compute()
    assert _job_view(null_pipeline)["rows_total"] == len(frame)  # counted by the workers as they read
    monkeypatch.undo()
    on_client = _run(null_pipeline, frame)  # the same rows from Python
    assert list(on_cluster.index) == list(frame.index)
    for column in ("answer", "error", "prompt_tokens", "completion_tokens", "finish_reason"):
        assert _values(on_cluster[column]) == on_client[column], column
    assert on_cluster["error"].iloc[4] == "input: document is empty"


def test_generate_on_a_dataframe_gives_pipeline_runs_rows(null_pipeline):
    prompts = pd.DataFrame({"prompt": ["Say hi", "Say bye", None, "Say hi"] * 3})
    chats = pd.DataFrame(
        {
            "messages": [[{"role": "user", "content": f"Count to {i}"}] for i in range(6)]
            + [[{"role": "assistant", "content": "no user turn"}]]
        }
    )
    for frame, failed in ((prompts, 3), (chats, 1)):  # prompts; chat messages (a list column)
        with dask.config.set({"dataframe.convert-string": False}):  # (else Dask makes the lists text)
            ddf = dd.from_pandas(frame, npartitions=2, sort=False)
        on_cluster = null_pipeline.map_dataframe(ddf, task="generate").compute()
        on_client = _run(null_pipeline, frame, task="generate")
        assert list(on_cluster.index) == list(frame.index)
        for column in ("answer", "error", "prompt_tokens", "finish_reason"):
            assert _values(on_cluster[column]) == on_client[column], (list(frame.columns), column)
        assert on_cluster["error"].notna().sum() == failed
    # a pandas frame's lists of messages stay lists
    assert null_pipeline.map_dataframe(chats, task="generate").compute()["error"].notna().sum() == 1
