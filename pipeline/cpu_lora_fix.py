"""A vLLM plugin that keeps rows without an adapter free of other rows' adapters on CPU.

vLLM's CPU platform runs LoRA through plain PyTorch ops (``vllm/lora/ops/torch_ops``) that pick
each row's adapter weights by ``weights[index]``. A row without adapter has index -1, which
PyTorch reads as the last slot: in a batch that mixes rows with and without adapters, the rows
without one get the last loaded adapter's delta, silently (vLLM 0.32; vllm-project/vllm#48421,
open). The GPU kernels skip index -1. This plugin wraps the three gathering ops so that rows with
index -1 get a zero delta and the other rows' results stay bit for bit the same.

Registered as a ``vllm.general_plugins`` entry point (pyproject.toml), vLLM loads it in each of
its processes in this environment, plain vLLM's included; ``VLLM_PLUGINS`` names the plugins to
load where it is set. It imports nothing of this package beyond this module.
"""

from __future__ import annotations

import functools
import importlib
import sys

_OPS = ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice")
# modules that bind the ops by name when imported (the package binds them as lora_ops is imported)
_USERS = ("vllm.lora.ops.torch_ops", "vllm.lora.punica_wrapper.punica_cpu")


def skip_rows_without_adapter(op):
    """``op`` (a torch_ops bgmv op: inputs, weights, output, indices, ...) with rows of index -1
    given zero weights instead of the last slot's."""
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
    """The entry point: wraps the ops in vLLM's modules that hold them (loaded, or loaded now)."""
    ops = importlib.import_module("vllm.lora.ops.torch_ops.lora_ops")
    for name in _OPS:
        setattr(ops, name, skip_rows_without_adapter(getattr(ops, name)))
    for user in filter(None, map(sys.modules.get, _USERS)):
        for name in _OPS:
            if hasattr(user, name):
                setattr(user, name, getattr(ops, name))
