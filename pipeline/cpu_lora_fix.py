"""A vLLM plugin that keeps rows without an adapter free of other rows' adapters on CPU.

vLLM's CPU LoRA ops pick each row's adapter weights by ``weights[index]``, and a row without an
adapter has index -1, which PyTorch reads as the last slot: in a mixed batch it silently gets the
last loaded adapter's delta (vLLM 0.32, vllm-project/vllm#48421). This plugin wraps those ops so
such rows get a zero delta and other rows stay bit for bit the same. vLLM loads it in each of its
processes through the ``vllm.general_plugins`` entry point, so it imports nothing else of ours."""

from __future__ import annotations

import functools
import importlib
import sys

_OPS = ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice")
# modules that bind the ops by name when imported, so each must be patched
_USERS = ("vllm.lora.ops.torch_ops", "vllm.lora.punica_wrapper.punica_cpu")


def skip_rows_without_adapter(op):
    """A bgmv ``op`` that gives rows of index -1 zero weights instead of the last slot's."""
    if getattr(op, "skips_rows_without_adapter", False):
        return op

    @functools.wraps(op)
    def wrapped(inputs, weights, output, indices, *args, **kwargs):
        missing = indices < 0
        if bool(missing.any()):
            import torch

            picked = weights[indices.clamp(min=0)]
            keep = (~missing).to(picked.dtype).view(-1, *([1] * (picked.dim() - 1)))
            weights, indices = picked * keep, torch.arange(len(indices), device=indices.device)
        return op(inputs, weights, output, indices, *args, **kwargs)

    wrapped.skips_rows_without_adapter = True
    return wrapped


def install() -> None:
    """The entry point: wraps the ops, and rebinds them in the vLLM modules already loaded."""
    ops = importlib.import_module("vllm.lora.ops.torch_ops.lora_ops")
    for name in _OPS:
        setattr(ops, name, skip_rows_without_adapter(getattr(ops, name)))
    for user in filter(None, map(sys.modules.get, _USERS)):
        for name in _OPS:
            if hasattr(user, name):
                setattr(user, name, getattr(ops, name))
