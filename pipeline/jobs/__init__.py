"""Jobs on the cluster: Parquet or OpenAI batch JSONL in, one output row per input row out
(``job`` checks and prepares one; ``command`` is ``python -m pipeline run``; ``cluster_job``
coordinates it, ``cluster_tasks`` are the tasks the workers run), the input (``input``,
``partitions``, ``prompt_table``, ``jsonl_input``), undecodable text found per row
(``row_checks``), answers committed as they come (``answer_files``, ``job_folder``, ``output``),
OpenAI batch response lines (``openai_batch``), local paths and fsspec URLs (``storage``) and
the error that stops a job (``errors``). Nothing is imported here: import the module.
"""
