import os

# Keep test logs readable; failures still show vLLM's warnings and errors.
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

# Tests never use (or disturb) a resident cluster the developer started with `python -m
# pipeline up`, nor the developer's worker logs: their own folders, for this session only.
import tempfile  # noqa: E402

os.environ["PIPELINE_CLUSTER_DIR"] = tempfile.mkdtemp(prefix="pipeline-test-cluster-")
os.environ["PIPELINE_LOG_DIR"] = tempfile.mkdtemp(prefix="pipeline-test-logs-")
