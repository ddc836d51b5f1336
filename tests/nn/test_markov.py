"""MarkovHead: embed, full and gathered bias, fused vs unfused, safetensors round trip."""
from __future__ import annotations

import pytest
import torch

from lowbit.formats import MXFP4, NVFP4
from lowbit.nn import MarkovHead


def make_head(w2_fmt: str, w1_fmt: str = "dense", v: int = 40, r: int = 32, device="cpu"):
    w1 = torch.randn(v, r) * 0.5
    w2 = torch.randn(v, r) * 0.5
    m1 = w1 if w1_fmt == "dense" else MXFP4.quantize(w1)
    m2 = w2 if w2_fmt == "dense" else NVFP4.quantize(w2)
    head = MarkovHead(m1, m2).to(device)
    w1_64 = (w1 if w1_fmt == "dense" else m1.dequantize()).double()
    w2_64 = (w2 if w2_fmt == "dense" else m2.dequantize()).double()
    return head, w1_64, w2_64


@pytest.mark.parametrize("w2_fmt", ["dense", "nvfp4"])
@pytest.mark.parametrize("w1_fmt", ["dense", "mxfp4"])
def test_apply_bias_gathered(backend, w2_fmt, w1_fmt):
    head, w1_64, w2_64 = make_head(w2_fmt, w1_fmt, device=backend.device)
    b, t = 3, 5
    prev = torch.randint(0, 40, (b,), device=backend.device)
    idx = torch.stack([torch.randperm(40)[:t] for _ in range(b)]).to(backend.device)
    values = torch.randn(b, t, device=backend.device)
    logits = torch.full((b, 40), float("-inf"), device=backend.device)
    with backend.active():
        e = head.embed(prev, torch.float32)
        out = head.apply_bias_gathered(e, logits, values, idx, scale=0.5)
        unfused = head.apply_bias_gathered(e, torch.full_like(logits, float("-inf")), values, idx, 0.5, fused=False)
    assert out is logits
    torch.testing.assert_close(e.double().cpu(), w1_64[prev.cpu()], rtol=0, atol=0)
    expect = values.double().cpu() + 0.5 * torch.einsum("btr,br->bt", w2_64[idx.cpu()], w1_64[prev.cpu()])
    torch.testing.assert_close(logits.gather(1, idx).double().cpu(), expect, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(unfused, logits, rtol=1e-5, atol=1e-5)
    assert int(torch.isfinite(logits).sum()) == b * t


@pytest.mark.parametrize("w2_fmt", ["dense", "nvfp4"])
def test_apply_bias_all_rows(backend, w2_fmt):
    head, w1_64, w2_64 = make_head(w2_fmt, device=backend.device)
    e = torch.randn(2, 32, device=backend.device)
    logits = torch.randn(2, 40, device=backend.device)
    expect = logits.double().cpu() + 0.25 * e.double().cpu() @ w2_64.t()
    with backend.active():
        head.apply_bias(e, logits, 0.25)
    torch.testing.assert_close(logits.double().cpu(), expect, rtol=1e-5, atol=1e-5)


def test_forward_and_errors():
    head, w1_64, w2_64 = make_head("nvfp4")
    logits = torch.zeros(2, 40)
    head(torch.tensor([1, 2]), logits, 1.0)
    torch.testing.assert_close(logits.double(), w1_64[[1, 2]] @ w2_64.t(), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"embed must be \[B, r=32\]"):
        head.apply_bias(torch.zeros(2, 16), logits)
    with pytest.raises(ValueError, match=r"logits must be \[B, V\] = \(2, 40\)"):
        head.apply_bias(torch.zeros(2, 32), torch.zeros(2, 41))
    with pytest.raises(ValueError, match=r"markov_w1 has shape \(40, 32\) but markov_w2 has shape \(41, 32\)"):
        MarkovHead(torch.randn(40, 32), torch.randn(41, 32))
    with pytest.raises(ValueError, match="got str"):
        MarkovHead(torch.randn(40, 32), "w2")


def test_safetensors_roundtrip(tmp_path):
    head, _, _ = make_head("nvfp4")
    head.register_buffer("input_scale", torch.tensor(0.125))
    path = tmp_path / "markov.safetensors"
    head.to_safetensors(path, prefix="model.mtp.markov")
    from safetensors.torch import load_file

    raw = load_file(str(path))
    assert raw["model.mtp.markov.markov_w2.weight"].dtype == torch.uint8
    assert raw["model.mtp.markov.markov_w2.weight_scale"].dtype == torch.float8_e4m3fn
    assert raw["model.mtp.markov.markov_w2.weight_scale_2"].dim() == 0
    back = MarkovHead.from_safetensors(path, prefix="model.mtp.markov")
    w2, w2b = head.markov_w2, back.markov_w2
    assert isinstance(w2b, NVFP4)
    assert torch.equal(w2.packed, w2b.packed) and torch.equal(w2.scale.view(torch.uint8), w2b.scale.view(torch.uint8))
    assert torch.equal(w2.global_scale, w2b.global_scale) and float(back.input_scale) == 0.125
    assert torch.equal(head.markov_w1, back.markov_w1)
    with pytest.raises(ValueError, match="has no tensor 'other.markov_w1.weight'"):
        MarkovHead.from_safetensors(path, prefix="other")


def test_modelopt_layout_as_stored(tmp_path):
    """A ModelOpt-style file: scale stored as uint8 bits, weight_scale_2 as shape [1]."""
    from safetensors.torch import save_file

    w2 = NVFP4.quantize(torch.randn(24, 32))
    save_file({"p.markov_w1.weight": torch.randn(24, 32).bfloat16(),
               "p.markov_w2.weight": w2.packed,
               "p.markov_w2.weight_scale": w2.scale.view(torch.uint8),
               "p.markov_w2.weight_scale_2": w2.global_scale.reshape(1)}, str(tmp_path / "m.safetensors"))
    head = MarkovHead.from_safetensors(tmp_path / "m.safetensors", prefix="p")
    assert torch.equal(head.markov_w2.dequantize(), w2.dequantize()) and head.input_scale is None


@pytest.mark.parametrize("w1_fmt", ["dense", "nvfp4"])
@pytest.mark.parametrize("tok", [40, -1, 10**6])
def test_embed_out_of_range_token_is_value_error(w1_fmt, tok):
    head, _, _ = make_head("dense", w1_fmt)
    with pytest.raises(ValueError, match=f"token id {tok}, outside"):
        head.embed(torch.tensor([1, tok]))
    with pytest.raises(ValueError, match="dtype"):
        head.embed(torch.tensor([1.0]))
    assert head.embed(torch.tensor([0, 39])).shape == (2, 32)
