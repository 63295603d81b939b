"""LoRA adapters for the default model, made with PEFT for the adapter tests and bench: each
initialised at random (``init_lora_weights=False``, both matrices), so that a model with it answers
differently from the base model (checked by the tests), seeded so the same seed gives the same
adapter. Needs ``peft`` (the test extra)."""

from __future__ import annotations

from pathlib import Path


def make_adapter(base_model: str, folder: str | Path, seed: int, rank: int = 8) -> str:
    """A LoRA adapter of ``rank`` on the attention's q and v projections of ``base_model`` (a
    local checkpoint), saved as a PEFT folder; returns the folder."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_model, dtype=torch.float32)
    config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(model, config).save_pretrained(str(folder))
    return str(folder)
