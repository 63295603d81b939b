from pipeline import codec
from pipeline.prefix_memory import prefix_digest
from pipeline.sampling import Sampling
from pipeline.worker.grouped_answers import _row_sampling, batch_rows
from pipeline.results import ErrorKind, RowResult


def test_round_trip_and_each_document_once():
    doc = "The favourite colour of Ada is teal. " * 200
    other = "Grace keeps a moth in a notebook. " * 100
    groups = {doc: [(i, f"Question {i}?") for i in range(4)], other: [(9, "Where?")]}
    rows = codec.rows_of_groups(groups)
    header = codec.BatchHeader(batch_id="b1", truncate_prompts=True, sampling=Sampling(max_tokens=5))
    payload = codec.encode_batch(codec.RowsBatch(header, rows), level=1)
    back = codec.decode_batch(payload)
    assert back.header == header and back.rows.equals(rows)
    assert back.rows.column("position").to_pylist() == [0, 1, 2, 3, 9]
    assert back.rows.column("prefix").to_pylist() == [doc] * 4 + [other]
    assert len(back.rows.column("prefix").combine_chunks().dictionary) == 2   # each document once
    assert codec.raw_size(rows) == sum(len(p) + len(s) for p, items in groups.items() for _, s in items)
    assert len(payload) * 40 < codec.raw_size(rows)  # 4 copies of the text shipped as one, compressed


def test_a_rows_own_sampling_travels_in_its_columns_to_the_worker():
    own = {1: Sampling(temperature=0.5, stop=["\n"]), 2: Sampling(choice=["yes", "no"])}
    sent = codec.rows_of_groups({"doc ": [(0, "a?"), (1, "b?"), (2, "c?")]}, own.get)
    rows = codec.decode_batch(codec.encode_batch(codec.RowsBatch(codec.BatchHeader(batch_id="b"), sent))).rows
    digested, prefixes = batch_rows(rows)
    assert digested.column("digest").to_pylist() == [prefix_digest("doc ")] * 3 and prefixes == {
        prefix_digest("doc "): "doc "}
    assert _row_sampling(digested) == [None, own[1], own[2]]
    # a batch whose rows have none carries no sampling columns
    assert codec.rows_of_groups({"doc ": [(0, "a?")]}, own.get).column_names == ["position", "prefix", "suffix"]


def test_result_round_trip():
    res = codec.BatchResult(batch_id="b", shard="cpu0", results=[
        RowResult(3, answer="teal", prompt_tokens=100, cached_tokens=64, completion_tokens=2, shard="cpu0", latency_s=0.5),
        RowResult.failed(4, ErrorKind.ENGINE, "ValueError: too long", prompt_tokens=9000, shard="cpu0")])
    assert codec.decode_result(codec.encode(res)) == res


def test_a_result_carries_its_error_kind_typed():
    res = codec.BatchResult(batch_id="b", shard="cpu0", results=[
        RowResult.failed(4, ErrorKind.INPUT, "prompt too long (3000 tokens)")])
    back = codec.decode_result(codec.encode(res)).results[0]
    assert back.error_kind is ErrorKind.INPUT and back.error == "input: prompt too long (3000 tokens)"
