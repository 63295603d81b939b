"""Code that runs a job in the user's process: Parquet or OpenAI batch JSONL in, one output row
per input row out (``job``; ``command`` is ``python -m pipeline run``), the input read in bounded memory (``input``), undecodable text
found per row (``row_checks``), the output committed as results complete (``output``; on an
object store ``store_output``), OpenAI batch response lines (``openai_batch``), local paths and
fsspec URLs (``storage``) and the error that stops a job (``errors``). Nothing is imported
here: import the module.
"""
