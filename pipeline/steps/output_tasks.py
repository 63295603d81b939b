"""The end of a file job on the workers: each partition's answers merged in input order with the input's own
columns, then OUTPUT made from the parts."""

from __future__ import annotations

import pyarrow as pa

from pipeline.data.answer_files import AnswerFiles
from pipeline.data.input import OpenAIBatchSource, ParquetSource
from pipeline.data.partitions import ByteBlock, Partition
from pipeline.steps.cluster_tasks import JobSpec
from pipeline.steps.prompt_table import read_partition


def merge_task(spec: JobSpec, part: Partition | ByteBlock) -> int:
    source = spec.source
    assert isinstance(source, (ParquetSource, OpenAIBatchSource))
    if isinstance(part, ByteBlock):
        from pipeline.steps.jsonl_input import block_carry

        carry = block_carry(source, part)
    else:
        carry = read_partition(source, part, columns=source.passthrough + (["id"] if source.key else []))
    return AnswerFiles(spec.folder).merge(part, carry, spec.schema, source.key)


def fixed_embeddings(schema: pa.Schema | None, size: int | None) -> pa.Schema | None:
    """``schema`` with its embedding column a fixed-size list; the answer files keep lists of any size because the
    size is known only once the engines run. None where nothing changes."""
    if schema is None or not size or "embedding" not in schema.names:
        return None
    at = schema.get_field_index("embedding")
    return schema.set(at, pa.field("embedding", pa.list_(pa.float32(), size)))


def finish_task(spec: JobSpec, partitions: list[Partition], final: str, lines=None) -> None:
    """OUTPUT from the merged parts: Parquet, or JSONL given an OpenAI batch job's ``lines``."""
    files = AnswerFiles(spec.folder)
    if lines is None:
        files.finish(partitions, spec.schema, final, fixed_embeddings(spec.schema, spec.embedding_size))
    else:
        files.finish_lines(partitions, spec.schema, final, lines)
