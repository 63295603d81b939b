import os

# Keep test logs readable; failures still show vLLM's warnings and errors.
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

# Tests never use (or disturb) a resident cluster the developer started with `python -m
# pipeline up`, nor the developer's worker logs: their own folders, for this session only.
import tempfile  # noqa: E402

os.environ["PIPELINE_CLUSTER_DIR"] = tempfile.mkdtemp(prefix="pipeline-test-cluster-")
os.environ["PIPELINE_LOG_DIR"] = tempfile.mkdtemp(prefix="pipeline-test-logs-")


import pytest  # noqa: E402


@pytest.fixture
def run_killed_once_answered():
    """``(args, env, answers, files, timeout)``: starts ``python -m pipeline run ARGS`` (only the
    client: a resident cluster lives on) and SIGKILLs it once ``files`` answer files are in the
    folder ``answers`` (OUTPUT.partial/answers)."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    def run(args, env, answers: Path, files: int, timeout: float) -> None:
        client = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "run", *map(str, args)],
            cwd=Path(__file__).resolve().parents[1],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + timeout
        while len(list(answers.glob("p*/*.parquet"))) < files:
            assert client.poll() is None, client.communicate()
            assert time.monotonic() < deadline, "no answers committed in time"
            time.sleep(0.05)
        client.send_signal(signal.SIGKILL)
        client.wait()

    return run


@pytest.fixture(scope="session")
def classifier_model(tmp_path_factory):
    """A sequence-classification model built here without network: all-MiniLM-L6-v2 (the packaged
    embedding model, pipeline/model.py) with a seeded 3-label head (negative, neutral, positive)."""
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    from pipeline import load_config
    from pipeline.model import MINILM_NAME, resolve_model

    base = resolve_model(load_config().replace(model={"path": MINILM_NAME}))
    out = tmp_path_factory.mktemp("classifier") / "minilm-sentiment"
    torch.manual_seed(44)
    labels = {0: "negative", 1: "neutral", 2: "positive"}
    model = BertForSequenceClassification.from_pretrained(
        base, num_labels=3, id2label=labels, label2id={v: k for k, v in labels.items()}
    )
    with torch.no_grad():  # (a head that tells the rows apart: the default's logits are near zero)
        model.classifier.weight.normal_(0, 0.5)
        model.classifier.bias.normal_(0, 0.1)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return str(out)
