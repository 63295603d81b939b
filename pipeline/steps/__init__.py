"""The tasks the Dask workers run for a job: read a partition into prompt rows, place every
document of the job on a shard, split the rows by shard, answer each bucket on its shard's
engine, merge the answers beside the input (``cluster_tasks``; a DataFrame's partitions:
``frame_tasks``), the prompt rows themselves (``prompt_table``, OpenAI batch lines:
``jsonl_input``), ``placement`` and rows' adapters (``adapter_keys``). The client submits these
functions; nothing here imports the client's code. Nothing is imported here: import the module.
"""
