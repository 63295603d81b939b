"""A job's files and rows, read and written the same way by the client and the workers: the
input (``input``, ``partitions``, undecodable text per row: ``row_checks``, Arrow string helpers:
``text_arrays``, OpenAI /v1/score and /v1/rerank lines: ``scoring_lines``), answers committed as
they come (``answer_files``, ``job_folder``, ``output``), local paths and fsspec URLs
(``storage``) and the error that stops a job (``errors``). Imports neither the client's code nor
the workers'. Nothing is imported here: import the module.
"""
