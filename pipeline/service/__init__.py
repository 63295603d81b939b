"""The batch service: OpenAI's Files and Batches API over HTTP beside the cluster. Each batch is an ordinary file
job, so committed answers, resume and cancellation come from the job machinery."""
