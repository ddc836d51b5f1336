"""NVIDIA ModelOpt NVFP4 checkpoints.

Per quantized linear ``<prefix>``:

* ``<prefix>.weight``         uint8 ``[N, K/2]``: E2M1 pairs, element 2i in the low nibble
* ``<prefix>.weight_scale``   float8_e4m3fn ``[N, K/16]``: per-16 block scales, linear layout
* ``<prefix>.weight_scale_2`` fp32 scalar: the global scale, a *multiplier*
* ``<prefix>.input_scale``    fp32 scalar, optional (static activation scale)

plus ``hf_quant_config.json`` beside the weights (see :func:`modelopt_quant_config`).
Scalars may be stored as shape ``()`` or ``(1,)``; both are read, and the writer takes the shape.
"""
from __future__ import annotations

import fnmatch
from typing import Mapping

import torch

from lowbit._validate import check_tensor, require
from lowbit.formats.nvfp4 import GROUP_SIZE, NVFP4
from lowbit.io._tensors import get, get_scalar, has, name_of

QUANT_CONFIG_NAME = "hf_quant_config.json"


def read_nvfp4(tensors: Mapping[str, torch.Tensor], prefix: str) -> NVFP4:
    """The :class:`NVFP4` weight stored under ``prefix`` (tensors are shared, not copied)."""
    packed = get(tensors, prefix, "weight", dtypes=(torch.uint8,), ndim=2)
    n, half_k = packed.shape
    scale = get(tensors, prefix, "weight_scale", dtypes=(torch.float8_e4m3fn,), shape=(n, half_k * 2 // GROUP_SIZE))
    require((half_k * 2) % GROUP_SIZE == 0, f"tensor {name_of(prefix, 'weight')!r} has shape {tuple(packed.shape)}: K = {half_k * 2} is not a multiple of 16")
    gs = get_scalar(tensors, prefix, "weight_scale_2")
    return NVFP4(packed, scale, gs.reshape(()), GROUP_SIZE)


def read_input_scale(tensors: Mapping[str, torch.Tensor], prefix: str, suffix: str = "input_scale") -> torch.Tensor | None:
    """The optional fp32 scalar ``<prefix>.<suffix>`` as stored, or None when absent."""
    return get_scalar(tensors, prefix, suffix) if has(tensors, prefix, suffix) else None


def write_nvfp4(fmt: NVFP4, prefix: str, *, input_scale: torch.Tensor | float | None = None, scalar_shape: tuple = ()) -> dict[str, torch.Tensor]:
    """ModelOpt tensors for ``fmt`` under ``prefix``. ``scalar_shape`` is ``()`` or ``(1,)``."""
    require(isinstance(fmt, NVFP4), f"write_nvfp4 needs an NVFP4, got {type(fmt).__name__}")
    require(tuple(scalar_shape) in ((), (1,)), f"scalar_shape must be () or (1,), got {scalar_shape}")
    out = {
        name_of(prefix, "weight"): fmt.packed.contiguous(),
        name_of(prefix, "weight_scale"): fmt.scale.contiguous(),
        name_of(prefix, "weight_scale_2"): fmt.global_scale.reshape(scalar_shape).contiguous(),
    }
    if input_scale is not None:
        out[name_of(prefix, "input_scale")] = fp32_scalar("input_scale", input_scale, scalar_shape)
    return out


def fp32_scalar(name: str, value, shape: tuple) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        check_tensor(name, value, dtypes=(torch.float32,))
        require(value.numel() == 1, f"{name} must be a scalar, got shape {tuple(value.shape)}")
        return value.reshape(shape).contiguous()
    return torch.tensor(float(value), dtype=torch.float32).reshape(shape)


def modelopt_quant_config(exclude_modules=(), quant_algo: str = "NVFP4", producer_version: str | None = None) -> dict:
    """The ``hf_quant_config.json`` body ModelOpt writes for an NVFP4 export.

    ``kv_cache_quant_algo`` is always present (``null``: the KV cache is not quantized): vLLM
    refuses an NVFP4 ``hf_quant_config.json`` without it. vLLM reads ``quant_algo: NVFP4`` from
    this file as W4A4 (activations quantized with a static ``input_scale`` per layer, which a
    weight-only export has not got): a weight-only checkpoint also needs
    :func:`modelopt_hf_quantization_config` in its ``config.json``, which vLLM reads first.
    """
    require(quant_algo == "NVFP4", f"only quant_algo='NVFP4' is written, got {quant_algo!r}")
    producer = {"name": "modelopt"}
    if producer_version is not None:
        producer["version"] = producer_version
    return {
        "producer": producer,
        "quantization": {"quant_algo": quant_algo, "kv_cache_quant_algo": None, "group_size": GROUP_SIZE,
                         "exclude_modules": list(exclude_modules)},
    }


def modelopt_hf_quantization_config(ignore=(), producer_version: str | None = None) -> dict:
    """The ``quantization_config`` of ``config.json`` for a weight-only ModelOpt NVFP4 export
    (the layout :func:`write_nvfp4` writes, no ``input_scale``).

    ``quant_method: modelopt``, ``quant_algo: NVFP4`` and one config group over every ``Linear``
    whose ``input_activations`` is null: vLLM reads that as W4A16 NVFP4 (4-bit weights, 16-bit
    activations; the layout its DSpark Markov-head fast path reads). ``ignore``: modules left
    unquantized (names or fnmatch wildcards, as ``exclude_modules``).
    """
    producer = {"name": "lowbit"}
    if producer_version is not None:
        producer["version"] = producer_version
    return {
        "quant_method": "modelopt",
        "quant_algo": "NVFP4",
        "group_size": GROUP_SIZE,
        "kv_cache_scheme": None,
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 4, "type": "float", "group_size": GROUP_SIZE, "strategy": "tensor_group",
                        "symmetric": True, "dynamic": False},
            "input_activations": None,
        }},
        "ignore": list(ignore),
        "producer": producer,
    }


def check_quant_config(config: dict) -> dict:
    """Validate an ``hf_quant_config.json`` body (ValueError naming the bad field); return it."""
    require(isinstance(config, dict), f"{QUANT_CONFIG_NAME} must hold a JSON object, got {type(config).__name__}")
    q = config.get("quantization")
    require(isinstance(q, dict), f"{QUANT_CONFIG_NAME}: 'quantization' must be an object, got {q!r}")
    algo = q.get("quant_algo")
    require(isinstance(algo, str), f"{QUANT_CONFIG_NAME}: 'quantization.quant_algo' must be a string, got {algo!r}")
    if algo == "NVFP4":
        require(q.get("group_size", GROUP_SIZE) == GROUP_SIZE, f"{QUANT_CONFIG_NAME}: NVFP4 group_size must be 16, got {q.get('group_size')!r}")
    kv = q.get("kv_cache_quant_algo")
    require(kv is None or isinstance(kv, str), f"{QUANT_CONFIG_NAME}: 'quantization.kv_cache_quant_algo' must be a string or null, got {kv!r}")
    excl = q.get("exclude_modules", [])
    require(isinstance(excl, list) and all(isinstance(e, str) for e in excl),
            f"{QUANT_CONFIG_NAME}: 'quantization.exclude_modules' must be a list of strings, got {excl!r}")
    return config


def is_excluded(config: dict, module: str) -> bool:
    """Whether ``module`` matches an ``exclude_modules`` entry (names or fnmatch wildcards)."""
    patterns = config.get("quantization", {}).get("exclude_modules", []) or []
    return any(module == p or fnmatch.fnmatchcase(module, p) for p in patterns)
