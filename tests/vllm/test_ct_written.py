"""Checkpoint tensors written by compressed-tensors itself (the library llm-compressor saves with),
read by lowbit: integer pack-quantized (2 / 4 / 8 bits, with and without zero-points) and
mxfp4-pack-quantized, bit for bit what compressed-tensors' own decompressor gives.

The quantization parameters come from compressed-tensors too (``calculate_qparams`` over each
group's min / max, the preset ``MXFP4`` scheme), and the scales are stored in the model's dtype
(bf16), as a bf16 model's checkpoint holds them. compressed-tensors decompresses in the scale's
dtype, so its reference is taken with fp32 scales (the same values): exact products.
"""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("compressed_tensors")

from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme  # noqa: E402
from compressed_tensors.quantization.utils import calculate_qparams  # noqa: E402

from lowbit.io import read_int_ct, read_mxfp4_ct  # noqa: E402


def _as_checkpoint(compressed: dict, prefix: str) -> dict:
    return {f"{prefix}.{name}": t for name, t in compressed.items() if t is not None}


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("params_from_config", [True, False])
def test_lowbit_reads_pack_quantized_written_by_compressed_tensors(bits, symmetric, params_from_config):
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor

    n, k, g = 72, 320, 64
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(bits + 10 * symmetric)).to(torch.bfloat16)
    args = QuantizationArgs(num_bits=bits, type="int", symmetric=symmetric, strategy="group", group_size=g)
    groups = w.float().view(n, k // g, g)
    scale, zero = calculate_qparams(groups.amin(-1), groups.amax(-1), args)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    stored = PackedQuantizationCompressor.compress(
        {"weight": w, "weight_scale": scale.to(torch.bfloat16), "weight_zero_point": zero}, scheme)
    stored = {name: t for name, t in stored.items() if t is not None}
    assert ("weight_zero_point" in stored) == (not symmetric)

    ref_in = dict(stored, weight_scale=stored["weight_scale"].float())
    ref = PackedQuantizationCompressor.decompress(ref_in, scheme)["weight"].float()
    kw = dict(num_bits=bits, group_size=g) if params_from_config else {}
    got = read_int_ct(_as_checkpoint(stored, "model.layers.0.mlp.down_proj"), "model.layers.0.mlp.down_proj", **kw)
    assert got.shape == (n, k)
    assert torch.equal(got.dequantize().float(), ref)


def test_lowbit_reads_mxfp4_written_by_compressed_tensors():
    from compressed_tensors.compressors.mxfp4.base import MXFP4PackedCompressor
    from compressed_tensors.quantization import preset_name_to_scheme

    n, k = 40, 256
    w = (torch.randn(n, k, generator=torch.Generator().manual_seed(2)) * 3).to(torch.bfloat16)
    w[3, :32] = 0  # an all-zero group
    scheme = preset_name_to_scheme("MXFP4", ["Linear"])
    groups = w.float().view(n, k // 32, 32)
    scale, _ = calculate_qparams(groups.amin(-1), groups.amax(-1), scheme.weights)
    stored = {name: t for name, t in MXFP4PackedCompressor.compress({"weight": w, "weight_scale": scale}, scheme).items()
              if t is not None}
    ref = MXFP4PackedCompressor.decompress(dict(stored), scheme)["weight"].float()
    got = read_mxfp4_ct(_as_checkpoint(stored, "lm_head"), "lm_head")
    assert torch.equal(got.dequantize().float(), ref)
