"""Checkpoint I/O: map safetensors state dicts (name -> tensor) to lowbit formats and back.

Readers take a state dict and a layer prefix and return a format; writers take a format and a
prefix and return the state-dict entries, under each checkpoint family's own tensor names:

* ModelOpt NVFP4: :func:`read_nvfp4` / :func:`write_nvfp4` (``weight``, ``weight_scale``,
  ``weight_scale_2``, ``input_scale``) and ``hf_quant_config.json`` (:func:`modelopt_quant_config`).
* compressed-tensors: :func:`read_fp8_ct` / :func:`write_fp8_ct` (FP8 per tensor, channel or 128x128
  block; fp32, bf16 or fp16 scales), :func:`read_fp8_channel` / :func:`write_fp8_channel` (per channel) and
  :func:`read_nvfp4_ct` / :func:`write_nvfp4_ct` (NVFP4 with the *inverse* ``weight_global_scale``),
  :func:`read_mxfp4_ct` / :func:`write_mxfp4_ct` (``mxfp4-pack-quantized``) and :func:`read_int_ct` /
  :func:`write_int_ct` (integer ``pack-quantized`` <-> :class:`~lowbit.formats.INTx`, bit-exact).
* DeepSeek: :func:`read_fp8_block` / :func:`write_fp8_block` (FP8 + 128x128 ``weight_scale_inv`` or
  ``scale``), :func:`read_fp4_experts` / :func:`write_fp4_experts` (FP4 experts -> MXFP4).
* torchao (read only): :func:`read_torchao` (``Float8Tensor``, ``MXTensor``, ``NVFP4Tensor``,
  ``IntxUnpackedToInt8Tensor``, ``Int8Tensor`` -> FP8, MXFP4, NVFP4, INTx), described by the
  safetensors header that :func:`load_checkpoint` returns as ``quant_config`` (:func:`torchao_config`).

:func:`detect_format` names the variant under a prefix; :func:`read_layer` / :func:`write_layer`
round-trip a whole layer bit-exact; :func:`load_checkpoint` / :func:`save_checkpoint` read and
(atomically) write the files. Every missing name, wrong dtype or wrong shape is a ``ValueError``
naming the tensor.
"""
from lowbit.io.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from lowbit.io.compressed_tensors import (
    read_fp8_channel, read_fp8_ct, read_int_ct, read_mxfp4_ct, read_nvfp4_ct, write_fp8_channel, write_fp8_ct, write_int_ct,
    write_mxfp4_ct, write_nvfp4_ct,
)
from lowbit.io.deepseek import read_fp4_experts, read_fp8_block, write_fp4_experts, write_fp8_block
from lowbit.io.layer import (
    DENSE, FP8_BLOCK_CT, FP8_BLOCK_DEEPSEEK, FP8_ROW_CT, FP8_TENSOR_CT, INT_CT, MXFP4_CT, MXFP4_DEEPSEEK, NVFP4_CT, NVFP4_MODELOPT,
    VARIANTS,
    Layer, detect_format, read_layer, write_layer,
)
from lowbit.io.modelopt import (
    QUANT_CONFIG_NAME, check_quant_config, is_excluded, modelopt_quant_config, read_input_scale, read_nvfp4, write_nvfp4,
)
from lowbit.io.torchao import TORCHAO_VARIANTS, read_torchao, torchao_config, torchao_layers

__all__ = [
    "Checkpoint", "DENSE", "FP8_BLOCK_CT", "FP8_BLOCK_DEEPSEEK", "FP8_ROW_CT", "FP8_TENSOR_CT", "INT_CT", "Layer", "MXFP4_CT",
    "MXFP4_DEEPSEEK", "NVFP4_CT",
    "NVFP4_MODELOPT", "QUANT_CONFIG_NAME", "TORCHAO_VARIANTS", "VARIANTS", "check_quant_config", "detect_format", "is_excluded",
    "load_checkpoint", "modelopt_quant_config", "read_fp4_experts", "read_fp8_block", "read_fp8_channel", "read_fp8_ct",
    "read_input_scale", "read_int_ct", "read_mxfp4_ct", "read_layer", "read_nvfp4", "read_nvfp4_ct", "read_torchao", "save_checkpoint",
    "torchao_config", "torchao_layers", "write_fp4_experts",
    "write_fp8_block", "write_fp8_channel", "write_fp8_ct", "write_int_ct", "write_layer", "write_mxfp4_ct",
    "write_nvfp4", "write_nvfp4_ct",
]
