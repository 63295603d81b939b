from pipeline import codec


def test_round_trip_and_each_document_once():
    doc = "The favourite colour of Ada is teal. " * 200
    batch = codec.Batch(batch_id="b1", prefixes=[doc],
                        requests=[codec.Request(index=i, prefix=0, suffix=f"Question {i}?") for i in range(4)])
    payload = codec.encode(batch, level=1)
    assert codec.decode_batch(payload) == batch
    assert len(payload) * 40 < codec.raw_size(batch)  # 4 copies of the text shipped as one, compressed


def test_result_round_trip():
    res = codec.BatchResult(batch_id="b", shard="cpu0", results=[
        codec.Result(3, "teal", None, 100, 64, 2, "cpu0", 0.5),
        codec.Result(4, None, "engine: ValueError: too long", 9000, 0, 0, "cpu0", 0.01)])
    assert codec.decode_result(codec.encode(res)) == res
