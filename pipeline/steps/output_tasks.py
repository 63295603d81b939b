"""The end of a file job, as it runs on the workers: each input partition's answers merged into a
part of the output, in input order, with the input's own columns (``merge_task``), then OUTPUT
made from the parts (``finish_task``: Parquet, or OpenAI batch JSONL). The tasks before them:
pipeline/steps/cluster_tasks.py.
"""

from __future__ import annotations

import pyarrow as pa

from pipeline.data.answer_files import AnswerFiles
from pipeline.data.input import OpenAIBatchSource, ParquetSource
from pipeline.data.partitions import ByteBlock, Partition
from pipeline.steps.cluster_tasks import JobSpec
from pipeline.steps.prompt_table import read_partition


def merge_task(spec: JobSpec, part: Partition | ByteBlock) -> int:
    source = spec.source
    assert isinstance(source, (ParquetSource, OpenAIBatchSource))  # (only a file job's parts are merged)
    if isinstance(part, ByteBlock):  # (an OpenAI batch file's block of bytes: its source's format "openai")
        from pipeline.steps.jsonl_input import block_carry

        carry = block_carry(source, part)
    else:
        carry = read_partition(source, part, columns=source.passthrough + (["id"] if source.key else []))
    return AnswerFiles(spec.folder).merge(part, carry, spec.schema, source.key)


def fixed_embeddings(schema: pa.Schema | None, size: int | None) -> pa.Schema | None:
    """``schema`` with its embedding column a fixed-size list of ``size`` float32 (the answer files
    keep a list of any size: the size is known once the engines run); None where nothing changes."""
    if schema is None or not size or "embedding" not in schema.names:
        return None
    at = schema.get_field_index("embedding")
    return schema.set(at, pa.field("embedding", pa.list_(pa.float32(), size)))


def finish_task(spec: JobSpec, partitions: list[Partition], final: str, lines=None) -> None:
    """OUTPUT from the merged parts: Parquet, or with ``lines`` (an OpenAI batch job's
    ``openai_batch.ResponseLines``) JSONL."""
    files = AnswerFiles(spec.folder)
    if lines is None:
        files.finish(partitions, spec.schema, final, fixed_embeddings(spec.schema, spec.embedding_size))
    else:
        files.finish_lines(partitions, spec.schema, final, lines)
