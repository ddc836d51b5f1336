"""The Markov-head adapter against vLLM's own ``DSparkMarkovHead.apply_bias_gathered`` on CPU.

Modules are built directly (DSpark needs vLLM's GPU model runner to run end to end), in every
``markov_w2`` form vLLM's method takes on CPU: dense weights in the activation dtype, and the
ModelOpt W4A16 NVFP4 buffers vLLM retains for the gather (uint8 ``[V, r/2]``, e4m3 ``[V, r/16]``
linear layout, a one-element global scale), which vLLM dequantizes to the activation dtype here.
The vocabulary is padded by vLLM (1000 -> 1024 rows); only the first V rows are addressed.
"""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm")

from vllm.config import VllmConfig, set_current_vllm_config  # noqa: E402
from vllm.model_executor.models.qwen3_dspark import DSparkMarkovHead  # noqa: E402

import lowbit.integrations.vllm as plugin  # noqa: E402
from lowbit.formats.nvfp4 import NVFP4  # noqa: E402
from lowbit.integrations.vllm import config, markov, stats  # noqa: E402

V, R = 1000, 64
VLLM_METHOD = DSparkMarkovHead.apply_bias_gathered
# unit roundoff (half an ulp at 1) per dtype
U = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def _module(weight_dtype, nvfp4: bool, seed: int):
    g = torch.Generator().manual_seed(seed)
    with set_current_vllm_config(VllmConfig()):
        m = DSparkMarkovHead(V, V, R, prefix="markov_head", retain_weight_for_gather=nvfp4)
    rows = m.markov_w2.weight.shape[0]
    w = torch.randn(rows, R, generator=g) * 0.3
    if nvfp4:  # what vLLM's ModelOpt W4A16 NVFP4 processing registers (modelopt.py)
        q = NVFP4.quantize(w)
        w2 = m.markov_w2
        w2.is_w4a16_nvfp4 = True
        w2.register_buffer("_nvfp4_weight_for_gather", q.packed, persistent=False)
        w2.register_buffer("_nvfp4_weight_scale_for_gather", q.scale, persistent=False)
        w2.register_buffer("_nvfp4_weight_global_scale_for_gather", q.global_scale.reshape(1), persistent=False)
        w2._nvfp4_group_size_for_gather = 16
        rows64 = q.dequantize(torch.float64)
    else:
        m.markov_w2.weight.data = w.to(weight_dtype)
        rows64 = m.markov_w2.weight.double()
    return m, rows64


def _inputs(dtype, b, t, seed):
    g = torch.Generator().manual_seed(seed + 1)
    embed = torch.randn(b, R, generator=g).to(dtype)
    values = (torch.randn(b, t, generator=g) * 4).to(dtype)
    index = torch.stack([torch.randperm(V, generator=g)[:t] for _ in range(b)])  # distinct per row
    logits = torch.full((b, V), float("-inf"), dtype=dtype)
    return embed, values, index, logits


def _assert_parity(out, ref, embed, values, index, rows64, scale, nvfp4):
    """Both results within their derived bounds of the fp64 oracle (so within the sum of each other).

    lowbit: fp32 math (R products, error <= R*u32*sum|w x|), then one rounding to the dtype
    (u*|v|). vLLM: the same fp32 accumulation (ATen's CPU GEMMs accumulate reduced dtypes in fp32),
    one rounding of the result, and for NVFP4 each decoded weight rounded to the dtype first (u per
    product: u*|s|*sum|w x|)."""
    w = rows64[index]  # [b, t, R]
    prod = w * embed.double().unsqueeze(1)
    exact = values.double() + scale * prod.sum(-1)
    mag = abs(scale) * prod.abs().sum(-1)
    u = U[out.dtype]
    tol_lowbit = u * exact.abs() + 2 * R * U[torch.float32] * mag
    tol_vllm = tol_lowbit + (u * mag if nvfp4 else 0)
    got, want = out.gather(1, index).double(), ref.gather(1, index).double()
    assert ((got - exact).abs() <= tol_lowbit).all(), (got - exact).abs().max()
    assert ((want - exact).abs() <= tol_vllm).all(), (want - exact).abs().max()


@pytest.mark.parametrize("nvfp4", [False, True], ids=["dense", "nvfp4"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("b, t, scale", [(1, 1, 1.0), (3, 7, 0.5), (5, 33, -1.25)])
def test_matches_vllm(dtype, nvfp4, b, t, scale):
    seed = 17 * b + t
    m, rows64 = _module(dtype, nvfp4, seed)
    embed, values, index, logits = _inputs(dtype, b, t, seed)
    ref = VLLM_METHOD(m, embed, logits.clone(), values, index, scale)
    out_logits = logits.clone()
    out = markov.apply_bias_gathered(m, embed, out_logits, values, index, scale)
    assert out is out_logits
    written = torch.zeros(b, V, dtype=torch.bool).scatter_(1, index, True)
    assert torch.isneginf(out[~written]).all() and torch.isneginf(ref[~written]).all()
    _assert_parity(out, ref, embed, values, index, rows64, scale, nvfp4)


@pytest.mark.parametrize("nvfp4", [False, True], ids=["dense", "nvfp4"])
def test_matches_vllm_on_dspark_views(nvfp4):
    """As DSpark's sequential top-k loop calls it: one position of [B, n_spec, V] / [B, n_spec, k]."""
    m, rows64 = _module(torch.bfloat16, nvfp4, 5)
    g = torch.Generator().manual_seed(6)
    base = torch.full((2, 3, V), float("-inf"), dtype=torch.bfloat16)
    values = (torch.randn(2, 3, 8, generator=g) * 4).bfloat16()
    index = torch.stack([torch.stack([torch.randperm(V, generator=g)[:8] for _ in range(3)]) for _ in range(2)])
    embed = torch.randn(2, R, generator=g).bfloat16()
    ref = base.clone()
    VLLM_METHOD(m, embed, ref[:, 1], values[:, 1], index[:, 1], 1.0)
    markov.apply_bias_gathered(m, embed, base[:, 1], values[:, 1], index[:, 1], 1.0)
    written = torch.zeros(2, 3, V, dtype=torch.bool)
    written[:, 1].scatter_(1, index[:, 1], True)
    assert torch.isneginf(base[~written]).all() and torch.isneginf(ref[~written]).all()
    _assert_parity(base[:, 1], ref[:, 1], embed, values[:, 1], index[:, 1], rows64, 1.0, nvfp4)


def test_installed_method_runs_lowbit(monkeypatch):
    monkeypatch.setattr(DSparkMarkovHead, "apply_bias_gathered", VLLM_METHOD)
    monkeypatch.setenv("LOWBIT_VLLM", "markov")
    config.reset()
    stats.reset()
    try:
        plugin.register()
        m, _ = _module(torch.bfloat16, True, 3)
        embed, values, index, logits = _inputs(torch.bfloat16, 2, 5, 3)
        got = m.apply_bias_gathered(embed, logits.clone(), values, index, 0.75)
        want = markov.apply_bias_gathered(m, embed, logits.clone(), values, index, 0.75)
        assert torch.equal(got, want)
        assert stats.snapshot()["counts"]["markov_calls"] == 2
        # a tensor scale is left to vLLM's method (logged once)
        m.apply_bias_gathered(embed, logits.clone(), values, index, torch.tensor(0.75))
        assert stats.snapshot()["counts"]["markov_vllm_calls"] == 1
    finally:
        config.reset()
        stats.reset()
