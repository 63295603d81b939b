"""The batch service: OpenAI's Files and Batches API over HTTP beside the cluster (``python -m pipeline serve``).
Each batch is an ordinary file job whose input is the uploaded JSONL file and whose output lives in the store, so
committed answers, resume and cancellation come from the job machinery."""
