import pyarrow as pa
import pyarrow.parquet as pq
import pytest


@pytest.fixture
def corrupt_second_file():
    """``write(folder, rows, n)``: rows[:n] to folder/a.parquet, rows[n:] to folder/b.parquet, then a
    broken page header in b's ``document`` column (its footer and ids intact, so the job starts
    and fails midway); returns b's intact bytes, to fix it with."""

    def write(folder, rows, n) -> bytes:
        folder.mkdir()
        pq.write_table(pa.Table.from_pylist(rows[:n]), folder / "a.parquet")
        pq.write_table(pa.Table.from_pylist(rows[n:]), folder / "b.parquet")
        good = (folder / "b.parquet").read_bytes()
        meta = pq.ParquetFile(folder / "b.parquet").metadata
        offset = meta.row_group(0).column(meta.schema.names.index("document")).data_page_offset
        data = bytearray(good)
        data[offset : offset + 24] = b"\xff" * 24
        (folder / "b.parquet").write_bytes(bytes(data))
        return good

    return write
