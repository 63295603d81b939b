"""The vLLM plugin that keeps CPU rows without an adapter free of the last slot's adapter
(pipeline/cpu_lora_fix.py): vLLM's own torch ops give a row of index -1 the last adapter's
delta; wrapped, that row gets none and the other rows' results are unchanged bit for bit."""

from importlib.metadata import entry_points

import torch

from pipeline.cpu_lora_fix import install, skip_rows_without_adapter


def _ops():
    from vllm.lora.ops.torch_ops import lora_ops

    return lora_ops


def _original(name):
    op = getattr(_ops(), name)
    return getattr(op, "__wrapped__", op)


def test_rows_without_adapter_get_no_delta_and_the_others_theirs():
    torch.manual_seed(0)
    slots, rank, width, out = 2, 4, 8, 6
    a = torch.randn(slots, 1, rank, width)
    b = torch.randn(slots, 1, out, rank)
    x = torch.randn(3, width)
    indices = torch.tensor([0, -1, 1])

    shrunk, plain = torch.zeros(3, rank), torch.zeros(3, rank)
    skip_rows_without_adapter(_original("bgmv_shrink"))(x, a, shrunk, indices, 0.5)
    _original("bgmv_shrink")(x, a, plain, indices, 0.5)
    assert torch.equal(shrunk[1], torch.zeros(rank))
    assert not torch.equal(plain[1], torch.zeros(rank))  # vLLM's own op: the last slot's adapter
    assert torch.equal(shrunk[[0, 2]], plain[[0, 2]])

    base = torch.randn(3, out)
    expanded = base.clone()
    skip_rows_without_adapter(_original("bgmv_expand"))(plain, b, expanded, indices, True)
    assert torch.equal(expanded[1], base[1])
    mine = base.clone()
    _original("bgmv_expand")(plain, b, mine, indices, True)
    assert torch.equal(expanded[[0, 2]], mine[[0, 2]])

    sliced = torch.zeros(3, out + 2)
    skip_rows_without_adapter(_original("bgmv_expand_slice"))(plain, b, sliced, indices, 2, out, False)
    assert torch.equal(sliced[1], torch.zeros(out + 2))
    assert torch.allclose(sliced[0, 2:], plain[0] @ b[0, 0].T, atol=1e-5)


def test_vllm_loads_it_and_prefill_ops_go_through_it():
    assert "pipeline.cpu_lora_fix:install" in {e.value for e in entry_points(group="vllm.general_plugins")}
    install()
    install()  # (loaded in each process: wrapping once)
    from vllm.lora.ops import torch_ops

    ops = _ops()
    for name in ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice"):
        assert getattr(ops, name).skips_rows_without_adapter
        assert getattr(torch_ops, name) is getattr(ops, name)
        assert not hasattr(getattr(ops, name).__wrapped__, "__wrapped__")
    # sgmv (prefill) explodes per-sequence indices onto tokens and calls the wrapped bgmv op
    a = torch.randn(2, 1, 4, 8)
    x = torch.randn(5, 8)
    got = torch.zeros(5, 4)
    ops.sgmv_shrink(x, a, got, None, torch.tensor([2, 3]), torch.tensor([-1, 0]), 2, 3, 5, 1.0)
    assert torch.equal(got[:2], torch.zeros(2, 4))
    assert torch.allclose(got[2:], x[2:] @ a[0, 0].T, atol=1e-5)
