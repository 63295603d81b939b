"""The client's side of a job: ``cluster_job`` plans it (partitions, the tasks it submits from
pipeline/steps) and watches it (progress, lost shards: ``recovery``); a file job's steps
(``file_steps``), what a DataFrame's and a stream's share (``kept_steps``), a resumed output's
keys (``key_check``); ``job`` checks and prepares a file job and ``command`` is ``python -m
pipeline run``; OpenAI batch response lines (``openai_batch``). Nothing is imported here:
import the module.
"""
