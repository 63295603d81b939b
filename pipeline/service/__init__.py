"""The batch service: OpenAI's Files and Batches API over HTTP beside the cluster
(``python -m pipeline serve``; docs/service.md).

A batch is an ordinary file job of this project (pipeline/jobs/job.py): its input is the
uploaded OpenAI batch JSONL file, its output a JSONL file in the store; the job's committed
answers, resume and cancellation are the job machinery's. The modules:

- ``store``: the folder that holds files and batches (their records as JSON);
- ``objects``: OpenAI's file and batch objects, and their ids;
- ``errors``: OpenAI-shaped HTTP errors;
- ``runner``: runs each batch as a job on the cluster, resumes unfinished ones at start;
- ``result_files``: a finished job's output split into OpenAI's output and error files;
- ``app``: the HTTP routes (FastAPI);
- ``command``: ``python -m pipeline serve``.
"""
