"""safetensors files with an optional ``hf_quant_config.json`` beside them, written atomically."""
from __future__ import annotations

import json
import os
import tempfile
from typing import Mapping, NamedTuple

import torch

from lowbit._validate import require
from lowbit.io.modelopt import QUANT_CONFIG_NAME, check_quant_config
from lowbit.io.torchao import PRODUCER as TORCHAO, torchao_config


class Checkpoint(NamedTuple):
    tensors: dict[str, torch.Tensor]
    quant_config: dict | None


def _safetensors():
    try:
        import safetensors.torch as st
    except ImportError as e:  # pragma: no cover - safetensors is a hard dependency
        raise ImportError("lowbit.io needs the 'safetensors' package (pip install safetensors)") from e
    return st


def load_checkpoint(path: str | os.PathLike, device: str | torch.device = "cpu") -> Checkpoint:
    """Read one ``.safetensors`` file, or every ``*.safetensors`` file of a directory.

    Returns ``Checkpoint(tensors, quant_config)``; ``quant_config`` is the parsed and checked
    ``hf_quant_config.json`` next to the file(s); for files torchao wrote, the per-weight entries
    of their safetensors headers (:func:`lowbit.io.torchao_config`, read with
    :func:`lowbit.io.read_torchao`); else None. A name present in two shards is a ValueError.
    """
    _safetensors()  # a clear ImportError without the package
    path = os.fspath(path)
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors"))
        require(len(files) > 0, f"no .safetensors files in directory {path!r}")
        folder = path
    else:
        require(os.path.isfile(path), f"checkpoint file {path!r} does not exist")
        files, folder = [path], os.path.dirname(os.path.abspath(path))
    tensors: dict[str, torch.Tensor] = {}
    from safetensors import SafetensorError, safe_open

    torchao: dict = {}
    for f in files:
        try:
            with safe_open(f, framework="pt", device=str(device)) as fh:  # one open: tensors and header
                header = torchao_config(fh.metadata())
                loaded = {name: fh.get_tensor(name) for name in fh.keys()}
        except SafetensorError as e:
            raise ValueError(f"{f!r} is not a readable safetensors file (truncated or corrupt?): {e}") from None
        torchao.update(header["tensors"] if header else {})
        for name, t in loaded.items():
            require(name not in tensors, f"tensor {name!r} appears in more than one file under {path!r}")
            tensors[name] = t
    cfg_path = os.path.join(folder, QUANT_CONFIG_NAME)
    config = None
    if os.path.isfile(cfg_path):
        with open(cfg_path) as fh:
            try:
                config = json.load(fh)
            except json.JSONDecodeError as e:
                raise ValueError(f"{cfg_path!r} is not valid JSON: {e}") from e
        check_quant_config(config)
    if torchao:
        require(config is None, f"{path!r} holds torchao-written safetensors and a {QUANT_CONFIG_NAME}: two quantization configs")
        config = {"producer": {"name": TORCHAO}, "tensors": torchao}
    return Checkpoint(tensors, config)


def _umask() -> int:
    from lowbit.io.convert import _umask as umask

    return umask()


def _atomic_write(path: str, write) -> None:
    """Write through a temporary file in the same folder, then rename over ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix="-" + os.path.basename(path), dir=folder)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would survive the rename
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def save_checkpoint(path: str | os.PathLike, tensors: Mapping[str, torch.Tensor], quant_config: dict | None = None,
                    metadata: Mapping[str, str] | None = None) -> None:
    """Write ``tensors`` to the safetensors file ``path`` (and ``quant_config`` beside it).

    Both files are written to a temporary name and renamed, so an interrupted save never leaves a
    half-written file under the final name. Tensors on any device are accepted (copied to CPU).
    ``metadata`` is safetensors' string header metadata (``{"format": "pt"}`` by default).
    """
    st = _safetensors()
    path = os.fspath(path)
    require(isinstance(tensors, Mapping) and len(tensors) > 0, "save_checkpoint needs a non-empty mapping of name -> tensor")
    for name, t in tensors.items():
        require(isinstance(name, str), f"tensor names must be strings, got {name!r}")
        require(isinstance(t, torch.Tensor), f"tensor {name!r} is a {type(t).__name__}, not a tensor")
    if quant_config is not None:
        check_quant_config(quant_config)
    folder = os.path.dirname(os.path.abspath(path))
    require(os.path.isdir(folder), f"folder {folder!r} does not exist")
    cpu = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    meta = dict(metadata) if metadata is not None else {"format": "pt"}
    _atomic_write(path, lambda tmp: st.save_file(cpu, tmp, metadata=meta))
    if quant_config is not None:
        def write_json(tmp):
            with open(tmp, "w") as fh:
                json.dump(quant_config, fh, indent=2, sort_keys=False)
                fh.write("\n")
        _atomic_write(os.path.join(folder, QUANT_CONFIG_NAME), write_json)
