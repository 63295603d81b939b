from pipeline import codec
from pipeline.results import ErrorKind, RowResult


def test_round_trip_and_each_document_once():
    doc = "The favourite colour of Ada is teal. " * 200
    batch = codec.Batch(batch_id="b1", prefixes=[doc],
                        requests=[codec.Request(index=i, prefix=0, suffix=f"Question {i}?") for i in range(4)])
    payload = codec.encode(batch, level=1)
    assert codec.decode_batch(payload) == batch
    assert len(payload) * 40 < codec.raw_size(batch)  # 4 copies of the text shipped as one, compressed


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
