"""Quantize the Linear / lm_head weights of a safetensors checkpoint (``lowbit convert``).

Which tensors: every 2-D floating-point ``*.weight`` of 16-bit or wider dtype, except
embeddings and norms (by name: ``embed``, ``wte``, ``wpe``, ``norm``, ``ln_``, ...), tensors with
fewer than 16 rows (routers / gates), and names matching a user ``exclude`` pattern (fnmatch, on
the tensor name or its module prefix). Everything else is copied unchanged.

Formats and the names they are written under (the names each family's readers use, see
:mod:`lowbit.io`):

* ``nvfp4`` — ModelOpt: ``weight`` uint8 ``[N, K/2]``, ``weight_scale`` e4m3 ``[N, K/16]``,
  ``weight_scale_2`` fp32 scalar; ``hf_quant_config.json`` (excluded modules listed) and, in a
  ``config.json`` copied from the source, a weight-only (W4A16) ModelOpt ``quantization_config``.
  Modules an engine fuses into one GEMM (``q/k/v_proj``, ``gate/up_proj``, see
  :data:`FUSED_SIBLINGS`) share one global scale, as ModelOpt exports them. K % 16 == 0.
* ``mxfp4`` — layout ``deepseek`` (default): DeepSeek FP4 experts, ``weight`` int8 ``[N, K/2]`` +
  ``scale`` UE8M0 ``[N, K/32]``; layout ``compressed-tensors``: ``mxfp4-pack-quantized``
  (``weight_packed`` uint8 + ``weight_scale`` uint8 UE8M0) with its ``quantization_config``.
  K % 32 == 0.
* ``fp8-block`` — DeepSeek FP8: ``weight`` e4m3 ``[N, K]`` + ``weight_scale_inv`` fp32
  ``[ceil(N/128), ceil(K/128)]`` (a multiplier despite the name); a ``config.json`` copied from
  the source gets DeepSeek's ``quantization_config``. Any shape. Fused siblings whose rows are not
  multiples of 128 get tied block scales, so an engine's fused reading (vLLM's) and the per-part
  one agree (:func:`fused_block_scales`).
* ``int2`` / ``int4`` / ``int8`` — layout ``plane-split`` (default): lowbit INTx (see
  :class:`lowbit.formats.INTx`): ``weight_packed`` uint8, ``weight_scale`` fp16, ``weight_zero``
  uint8 (``[N, Kp/G]``) and ``weight_shape`` int64 ``[N, K]``, read by lowbit only. Layout
  ``compressed-tensors``: ``pack-quantized`` (int32 words, fp16 scales, packed zero-points, see
  :func:`lowbit.io.write_int_ct`) with its ``quantization_config``, the same values bit for bit;
  K % group_size == 0 there. K % 16 == 0.

Which engine loads what: :func:`vllm_support` (also ``ConvertSummary.vllm``).

Every run also writes ``lowbit_quant_config.json`` (format, group size, which tensors were
quantized and which kept). Non-safetensors files of a source directory (config, tokenizer) are
copied. The whole output is built in a temporary sibling directory and renamed into place at the
end, so a failure (a tensor whose shape does not fit the format, a full disk) leaves nothing
half-written. The shape check runs over every tensor before any work is done.

The work is split into :func:`plan` (decide per tensor, validate), :func:`quantize_tensor` and
the shard writer, so a tensor-parallel split (``--mp N``: cut each quantized tensor along N or K
at group boundaries, one output directory per rank) can slot in between quantizing and writing.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import re
import shutil
import signal
import tempfile
import threading
from typing import Callable, Sequence

import torch

from lowbit._validate import require

FORMATS = ("nvfp4", "mxfp4", "fp8-block", "int2", "int4", "int8")
#: checkpoint layouts each format is written in, the default first
LAYOUTS = {"nvfp4": ("modelopt",), "mxfp4": ("deepseek", "compressed-tensors"), "fp8-block": ("deepseek",),
           "int2": ("plane-split", "compressed-tensors"), "int4": ("plane-split", "compressed-tensors"),
           "int8": ("plane-split", "compressed-tensors")}
#: module names an engine runs as one GEMM (vLLM's packed modules): their NVFP4 global scale is shared
FUSED_SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"), ("q_a_proj", "kv_a_proj_with_mqa"), ("w1", "w3"))
#: K must be a multiple of this for each format (fp8-block pads its last block: any K).
K_MULTIPLE = {"nvfp4": 16, "mxfp4": 32, "fp8-block": 1, "int2": 16, "int4": 16, "int8": 16}
#: Name parts (lower-cased, between dots or underscores) that mark embeddings and norms.
_SKIP_RE = re.compile(r"(^|[._])(embed\w*|wte|wpe|\w*norm\w*|ln_?\w*|rotary\w*|position_embeddings)(\.|$)")
MIN_ROWS = 16
CONFIG_NAME = "lowbit_quant_config.json"
INDEX_NAME = "model.safetensors.index.json"


@dataclasses.dataclass
class TensorPlan:
    name: str
    file: str  # source shard (basename)
    shape: tuple
    dtype: str
    quantize: bool
    reason: str  # why it is kept (empty when quantized)


@dataclasses.dataclass
class TensorReport:
    name: str
    shape: tuple
    action: str  # "quantized" or "kept (<reason>)"
    bytes_before: int
    bytes_after: int
    rel_err: float | None


@dataclasses.dataclass
class ConvertSummary:
    out: str
    fmt: str
    tensors: list[TensorReport]
    layout: str | None = None  # None: the format's default (LAYOUTS[fmt][0])

    @property
    def vllm(self) -> str:
        """Whether (and where) vLLM loads the written checkpoint, with any fused module whose
        parts vLLM would misread."""
        return vllm_support(self.fmt, self.layout, {_module(t.name): t.shape for t in self.quantized})[1]

    @property
    def bytes_before(self) -> int:
        return sum(t.bytes_before for t in self.tensors)

    @property
    def bytes_after(self) -> int:
        return sum(t.bytes_after for t in self.tensors)

    @property
    def quantized(self) -> list[TensorReport]:
        return [t for t in self.tensors if t.action == "quantized"]


def _source_files(src: str) -> tuple[str, list[str]]:
    """(folder, sorted safetensors basenames) of a file or directory checkpoint."""
    if os.path.isdir(src):
        files = sorted(f for f in os.listdir(src) if f.endswith(".safetensors"))
        require(files, f"no .safetensors files in directory {src!r}")
        return src, files
    require(os.path.isfile(src), f"checkpoint {src!r} does not exist")
    require(src.endswith(".safetensors"), f"checkpoint {src!r} is not a .safetensors file or a directory of them")
    return os.path.dirname(os.path.abspath(src)), [os.path.basename(src)]


_ST_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}


def _skip_reason(name: str, shape: tuple, dtype: str, exclude: Sequence[str]) -> str:
    prefix = name[: -len(".weight")] if name.endswith(".weight") else name
    if not name.endswith(".weight"):
        return "not a .weight"
    if len(shape) != 2:
        return f"{len(shape)}-D"
    if dtype not in _ST_DTYPES:
        return f"dtype {dtype}"
    for pat in exclude:
        if fnmatch.fnmatchcase(name, pat) or fnmatch.fnmatchcase(prefix, pat):
            return f"--exclude {pat}"
    if _SKIP_RE.search(name.lower()):
        return "embedding/norm"
    if shape[0] < MIN_ROWS:
        return f"{shape[0]} rows < {MIN_ROWS}"
    return ""


def _open_safetensors(path: str):
    """``safe_open(path)``; a truncated, empty or corrupt file is a ValueError naming it."""
    from safetensors import SafetensorError, safe_open

    try:
        return safe_open(path, framework="pt")
    except SafetensorError as e:
        raise ValueError(f"{path!r} is not a readable safetensors file (truncated or corrupt?): {e}") from None


def _umask() -> int:
    """The process umask, read without changing it where /proc allows (os.umask is a set-and-get)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _publish_modes(folder: str) -> None:
    """Give ``folder`` (made by mkdtemp, 0700) and everything in it the modes a plain ``mkdir`` /
    ``open`` would have given: 0777 & ~umask for folders, 0666 & ~umask for files (mkstemp's 0600
    would otherwise survive the atomic rename)."""
    mask = _umask()
    for root, dirs, names in os.walk(folder):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o777 & ~mask)
        for n in names:
            path = os.path.join(root, n)
            if not os.path.islink(path):
                os.chmod(path, (0o666 & ~mask) | (os.stat(path).st_mode & 0o111 & ~mask))
    os.chmod(folder, 0o777 & ~mask)


class _signals_deferred:
    """Block SIGINT / SIGTERM / SIGHUP for the few renames that swap the output into place, so a
    signal cannot land between them (it is delivered when the block ends). Main thread, POSIX
    only; a no-op elsewhere."""

    _SIGS = {getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n)}

    def __enter__(self):
        self.old = None
        if hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread():
            self.old = signal.pthread_sigmask(signal.SIG_BLOCK, self._SIGS)
        return self

    def __exit__(self, *exc):
        if self.old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.old)
        return False


def plan(src: str, fmt: str, exclude: Sequence[str] = ()) -> tuple[str, list[str], list[TensorPlan]]:
    """Decide, for every tensor of ``src``, whether it is quantized; check each quantized shape
    fits ``fmt`` (ValueError naming the tensor otherwise). Reads headers only."""
    require(fmt in FORMATS, f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    folder, files = _source_files(src)
    plans: list[TensorPlan] = []
    seen: set[str] = set()
    for f in files:
        with _open_safetensors(os.path.join(folder, f)) as fh:
            for name in fh.keys():
                require(name not in seen, f"tensor {name!r} appears in more than one file under {src!r}")
                seen.add(name)
                sl = fh.get_slice(name)
                shape, dtype = tuple(sl.get_shape()), sl.get_dtype()
                reason = _skip_reason(name, shape, dtype, exclude)
                plans.append(TensorPlan(name, f, shape, dtype, not reason, reason))
    mult = K_MULTIPLE[fmt]
    bad = [p for p in plans if p.quantize and p.shape[1] % mult]
    if bad:
        names = ", ".join(f"{p.name} {list(p.shape)}" for p in bad[:5]) + (" ..." if len(bad) > 5 else "")
        raise ValueError(f"format {fmt} needs the last dim (K) to be a multiple of {mult}; these tensors do not fit: "
                         f"{names}. Leave them out with --exclude or choose another format (fp8-block takes any shape)")
    return folder, files, plans


def quantize_tensor(w: torch.Tensor, prefix: str, fmt: str, group_size: int = 64, layout: str | None = None,
                    global_scale: torch.Tensor | float | None = None,
                    block_scale: torch.Tensor | None = None) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Quantize one ``[N, K]`` weight; return (tensors under the checkpoint names, dequantized fp32).

    ``layout``: one of ``LAYOUTS[fmt]`` (default the first). ``global_scale``: NVFP4 only (a
    shared one for fused siblings; default the tensor's own). ``block_scale``: fp8-block only, the
    fp32 ``[ceil(N/128), ceil(K/128)]`` scales to quantize with (default the weight's own)."""
    from lowbit.formats import FP8, MXFP4, NVFP4, INTx

    layout = _layout(fmt, layout)
    require(global_scale is None or fmt == "nvfp4", f"global_scale is for nvfp4 only, not {fmt}")
    require(block_scale is None or fmt == "fp8-block", f"block_scale is for fp8-block only, not {fmt}")
    if fmt == "nvfp4":
        from lowbit.io import write_nvfp4

        q = NVFP4.quantize(w, global_scale)
        return write_nvfp4(q, prefix), q.dequantize(torch.float32)
    if fmt == "mxfp4":
        from lowbit.io import write_fp4_experts, write_mxfp4_ct

        q = MXFP4.quantize(w)
        return (write_mxfp4_ct if layout == "compressed-tensors" else write_fp4_experts)(q, prefix), q.dequantize(torch.float32)
    if fmt == "fp8-block":
        from lowbit.io import write_fp8_block

        if block_scale is None:
            q = FP8.quantize(w, granularity="block", block_size=128)
        else:
            from lowbit.formats.fp8 import e4m3_saturate

            n, k = w.shape
            expanded = block_scale.repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k]
            q = FP8(e4m3_saturate(w.float() / expanded), block_scale, "block", 128)
        return write_fp8_block(q, prefix), q.dequantize(torch.float32)
    bits = int(fmt[3:])
    q = INTx.quantize(w, bits=bits, group_size=group_size)
    if layout == "compressed-tensors":
        from lowbit.io import write_int_ct

        return write_int_ct(q, prefix), q.dequantize(torch.float32)
    out = {
        f"{prefix}.weight_packed": q.packed.contiguous(),
        f"{prefix}.weight_scale": q.scale.contiguous(),
        f"{prefix}.weight_zero": q.zero.contiguous(),
        f"{prefix}.weight_shape": torch.tensor(list(w.shape), dtype=torch.int64),
    }
    return out, q.dequantize(torch.float32)


def _rel_err(w: torch.Tensor, deq: torch.Tensor) -> float:
    ref = w.double()
    denom = float(ref.norm())
    return float((deq.double() - ref).norm()) / denom if denom > 0 else float((deq.double() - ref).norm())


def _nbytes(tensors: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())


def _write_json(path: str, body: dict) -> None:
    with open(path, "w") as fh:
        json.dump(body, fh, indent=2)
        fh.write("\n")


def _save_shard(path: str, tensors: dict[str, torch.Tensor]) -> None:
    try:
        from lowbit.io import save_checkpoint
    except ImportError:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in tensors.items()}, path, metadata={"format": "pt"})
        return
    save_checkpoint(path, tensors)


def _layout(fmt: str, layout: str | None) -> str:
    require(fmt in FORMATS, f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if layout is None:
        return LAYOUTS[fmt][0]
    require(layout in LAYOUTS[fmt], f"format {fmt} is written in layout {' or '.join(LAYOUTS[fmt])}, not {layout!r}")
    return layout


def fused_groups(modules) -> list[list[str]]:
    """The quantized modules an engine fuses into one GEMM (same parent, names in one
    :data:`FUSED_SIBLINGS` set, in that set's order), each group of two or more."""
    groups: dict[tuple, list[tuple[int, str]]] = {}
    for m in modules:
        parent, _, leaf = m.rpartition(".")
        for i, names in enumerate(FUSED_SIBLINGS):
            if leaf in names:
                groups.setdefault((parent, i), []).append((names.index(leaf), m))
    return [[m for _, m in sorted(g)] for g in groups.values() if len(g) > 1]


def _misaligned(modules: dict, unit: int) -> list[str]:
    """Fused groups where a part other than the last has a row count that is not a multiple of
    ``unit``: vLLM places each part's row-blocked tensors at ``ceil(offset / unit)``."""
    return [" + ".join(g) for g in fused_groups(modules) if any(modules[m][0] % unit for m in g[:-1])]


def vllm_support(fmt: str, layout: str | None = None, modules: dict | None = None) -> tuple[str, str]:
    """``(where, message)``: where vLLM (0.32) loads a checkpoint ``lowbit convert`` writes in
    ``fmt`` / ``layout`` -- ``"cpu+gpu"``, ``"gpu"`` or ``"no"`` -- and one line saying so.

    ``modules`` (quantized module -> weight shape) adds the fused modules whose parts vLLM would
    misread: with ``fp8-block`` those whose rows vLLM's fused scale tensor cannot hold (convert
    ties the scales of parts that are not 128-row aligned, :func:`fused_block_scales`, so vLLM
    reads them right otherwise), with pack-quantized int a part whose rows are not a multiple of
    the zero-points' packing factor ``32 / bits``."""
    layout = _layout(fmt, layout)
    where, msg = _vllm_support(fmt, layout)
    bad: list[str] = []
    unit = 128
    if fmt == "fp8-block" and modules:
        bad = [" + ".join(g) for g in fused_groups(modules) if _tied_block_slots([modules[m][0] for m in g]) is None]
    elif fmt.startswith("int") and layout == "compressed-tensors" and modules:
        unit = 32 // int(fmt[3:])
        bad = _misaligned(modules, unit)
    if fmt == "fp8-block" and modules and "lm_head" in modules and where != "no":
        msg += (" vLLM keeps the LM head in the model's dtype for this format and cannot read a quantized lm_head: "
                "convert with --exclude lm_head.")
    if bad and where != "no":
        what = "128x128 block scales" if fmt == "fp8-block" else "packed zero-points"
        msg += (f" But vLLM cannot read the {what} of {', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''} right: the "
                f"fused parts' rows do not line up with vLLM's {unit}-row units (exclude those modules or choose another "
                "format).")
    return where, msg


def _vllm_support(fmt: str, layout: str) -> tuple[str, str]:
    if fmt == "fp8-block":
        return "cpu+gpu", ("vLLM loads this checkpoint (quantization 'fp8', 128x128 weight blocks, model dtype bf16 or fp16) on "
                           "GPUs and on CPUs with AMX (Sapphire Rapids or newer).")
    if fmt == "nvfp4":
        return "gpu", ("vLLM loads this checkpoint on NVIDIA GPUs as ModelOpt NVFP4 weight-only (W4A16, from config.json's "
                       "quantization_config); vLLM's CPU build has no NVFP4 linear kernel.")
    if fmt == "mxfp4":
        if layout == "compressed-tensors":
            return "gpu", ("vLLM loads this checkpoint (compressed-tensors mxfp4-pack-quantized) on NVIDIA GPUs of compute "
                           "capability 8.0+ (Marlin, weight-only; FlashInfer on 10.x also quantizes activations); vLLM's CPU "
                           "build has no MXFP4 linear kernel.")
        return "no", ("vLLM does not load this checkpoint as a whole: vLLM reads DeepSeek's FP4 names (weight + scale) only "
                      "for the routed experts of DeepSeek V3.2 / V4 models; pass --layout compressed-tensors for an MXFP4 "
                      "checkpoint vLLM loads on a GPU.")
    if layout == "plane-split":
        return "no", ("vLLM cannot load this checkpoint: lowbit's plane-split INTx layout is read by lowbit only; pass "
                      "--layout compressed-tensors for a checkpoint vLLM loads.")
    if fmt == "int4":
        return "cpu+gpu", ("vLLM loads this checkpoint (compressed-tensors pack-quantized, 4-bit weights with zero-points) "
                           "on CPU (model dtype fp16 or bf16, in and out features multiples of 32; fp16 keeps lowbit's "
                           "scales exact) and on NVIDIA GPUs (Marlin: group size 32, 64 or 128).")
    if fmt == "int8":
        return "gpu", ("vLLM loads this checkpoint (compressed-tensors pack-quantized, 8-bit weights with zero-points) only "
                       "on Hopper GPUs (Machete, group size a multiple of 64); vLLM's CPU build and Marlin have no "
                       "asymmetric 8-bit kernel.")
    return "no", ("vLLM 0.32 has no built-in kernel for 2-bit weights (only the optional Humming package on CUDA): this "
                  "compressed-tensors checkpoint is valid, but take it as not loadable by vLLM; lowbit reads it.")


def _shared_global_scales(folder: str, plans: list[TensorPlan]) -> dict[str, torch.Tensor]:
    """NVFP4 global scale per quantized tensor that has fused siblings (:func:`fused_groups`):
    ``max(amax) / (6 * 448)`` over the siblings, the scale NVFP4's quantizer gives the one with the
    largest amax. Reads those tensors once."""
    from lowbit.formats.e2m1 import E2M1_MAX
    from lowbit.formats.fp8 import E4M3_MAX

    by_module = {_module(p.name): p for p in plans if p.quantize}
    out: dict[str, torch.Tensor] = {}
    for group in fused_groups(by_module):
        members = [by_module[m] for m in group]
        amax = torch.zeros((), dtype=torch.float32)
        for p in members:
            with _open_safetensors(os.path.join(folder, p.file)) as fh:
                amax = torch.maximum(amax, fh.get_tensor(p.name).float().abs().amax())
        gs = amax / torch.full_like(amax, E2M1_MAX * E4M3_MAX)
        gs = torch.where(gs > 0, gs, torch.ones_like(gs))
        for p in members:
            out[p.name] = gs
    return out


def _tied_block_slots(rows: Sequence[int], block: int = 128):
    """``(slot, classes)`` for the parts of a fused GEMM with ``rows`` rows each: ``slot[(part,
    scale row)]`` numbers the stored scale rows, ``classes[slot]`` the class of slots one scale
    must serve (see :func:`fused_block_scales`); None where vLLM's layout cannot hold them."""
    offsets = [sum(rows[:i]) for i in range(len(rows))]
    nbs = [-(-n // block) for n in rows]
    slot = {}
    for i, nb in enumerate(nbs):
        for t in range(nb):
            slot[(i, t)] = len(slot)
    fused_rows = -(-sum(rows) // block)
    writer: dict[int, int] = {}
    for i, nb in enumerate(nbs):
        start = -(-offsets[i] // block)
        if start + nb > fused_rows:
            return None  # vLLM would write past its fused scale tensor
        for t in range(nb):
            writer[start + t] = slot[(i, t)]
    parent = list(range(len(slot)))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for i, n in enumerate(rows):
        for r in range(n):
            fused = (offsets[i] + r) // block
            if fused not in writer:
                return None
            a, b = find(slot[(i, r // block)]), find(writer[fused])
            if a != b:
                parent[a] = b
    return slot, torch.tensor([find(x) for x in range(len(slot))])


def fused_block_scales(parts: Sequence[torch.Tensor], block: int = 128) -> list[torch.Tensor] | None:
    """FP8 128x128 block scales for the parts of one fused GEMM (``[N_i, K]`` each, in fused
    order) that mean the same to a per-part reader and to vLLM, or None where vLLM's layout cannot
    hold them.

    vLLM loads part i's scale rows at fused scale row ``ceil(off_i / 128)`` on (a later part
    overwriting an earlier one) and reads fused weight row R under fused scale row ``R // 128``.
    Where a part's rows are not a multiple of 128 the two readings differ; the scale slots they tie
    together share one scale (``max(amax, 1e-4) / 448`` over all their rows, per column block).
    With every part but the last a multiple of 128, these are the parts' own scales, as
    ``FP8.quantize`` gives them."""
    from lowbit.formats.fp8 import fp8_scale_from_amax

    k = parts[0].shape[1]
    kb = -(-k // block)
    rows = [p.shape[0] for p in parts]
    nbs = [-(-n // block) for n in rows]
    tied = _tied_block_slots(rows, block)
    if tied is None:
        return None
    slot, classes = tied
    amax = torch.zeros(len(slot), kb, dtype=torch.float32)
    for i, p in enumerate(parts):
        padded = torch.zeros(nbs[i] * block, kb * block, dtype=torch.float32)
        padded[: rows[i], :k] = p.float().abs()
        blk = padded.view(nbs[i], block, kb, block).amax(dim=(1, 3))
        for t in range(nbs[i]):
            c = int(classes[slot[(i, t)]])
            amax[c] = torch.maximum(amax[c], blk[t])
    scale = fp8_scale_from_amax(amax)
    return [scale[classes[[slot[(i, t)] for t in range(nbs[i])]]].contiguous() for i in range(len(parts))]


def _fp8_fused_scales(folder: str, plans: list[TensorPlan]) -> dict[str, torch.Tensor]:
    """:func:`fused_block_scales` for every fused group whose parts are not all 128-row aligned."""
    by_module = {_module(p.name): p for p in plans if p.quantize}
    out: dict[str, torch.Tensor] = {}
    for group in fused_groups(by_module):
        members = [by_module[m] for m in group]
        if len({p.shape[1] for p in members}) != 1 or not any(p.shape[0] % 128 for p in members[:-1]):
            continue
        tensors = []
        for p in members:
            with _open_safetensors(os.path.join(folder, p.file)) as fh:
                tensors.append(fh.get_tensor(p.name))
        scales = fused_block_scales(tensors)
        if scales is not None:
            out.update({p.name: s for p, s in zip(members, scales)})
    return out


def convert(src: str | os.PathLike, out: str | os.PathLike, fmt: str, *, exclude: Sequence[str] = (),
            group_size: int = 64, overwrite: bool = False, layout: str | None = None,
            on_tensor: Callable[[str], None] | None = None, on_plan: Callable[[int], None] | None = None) -> ConvertSummary:
    """Quantize ``src`` (a ``.safetensors`` file or a directory of shards) into directory ``out``.

    ``fmt``: one of :data:`FORMATS`. ``group_size``: INTx group along K (int formats only).
    ``layout``: one of ``LAYOUTS[fmt]`` (default the first; ``"compressed-tensors"`` for a
    checkpoint vLLM loads from int4 / int8 / mxfp4). ``overwrite``: replace an existing ``out``. ``on_plan(n_quantized)`` is called once after
    planning, ``on_tensor(name)`` after each quantized tensor (progress bars). Returns a
    :class:`ConvertSummary`. Never writes into ``src``.
    """
    src, out = os.fspath(src), os.fspath(out)
    require(fmt in FORMATS, f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    layout = _layout(fmt, layout)
    if fmt.startswith("int"):
        require(isinstance(group_size, int) and group_size >= 16 and group_size % 16 == 0,
                f"--group-size must be a positive multiple of 16, got {group_size}")
    folder, files, plans = plan(src, fmt, exclude)
    if fmt.startswith("int") and layout == "compressed-tensors":
        bad = [p for p in plans if p.quantize and p.shape[1] % group_size]
        require(not bad, f"layout compressed-tensors needs K to be a multiple of the group size {group_size} (vLLM's kernels "
                         f"split K by whole groups); these tensors do not fit: "
                         + ", ".join(f"{p.name} {list(p.shape)}" for p in bad[:5]) + (" ..." if len(bad) > 5 else "")
                         + ". Leave them out with --exclude or choose another --group-size")
    out_abs = os.path.abspath(out)
    require(os.path.abspath(folder) != out_abs and not (os.path.isfile(src) and os.path.abspath(src) == out_abs),
            f"output {out!r} is the source checkpoint; choose another directory")
    reports: list[TensorReport] = []

    def build(tmp: str) -> None:
        if on_plan is not None:
            on_plan(sum(p.quantize for p in plans))
        weight_map: dict[str, str] = {}
        shared = _shared_global_scales(folder, plans) if fmt == "nvfp4" else {}
        blocks = _fp8_fused_scales(folder, plans) if fmt == "fp8-block" else {}
        for f in files:
            shard: dict[str, torch.Tensor] = {}
            with _open_safetensors(os.path.join(folder, f)) as fh:
                for p in (p for p in plans if p.file == f):
                    t = fh.get_tensor(p.name)
                    before = t.numel() * t.element_size()
                    if p.quantize:
                        tensors, deq = quantize_tensor(t, p.name[: -len(".weight")], fmt, group_size, layout,
                                                       shared.get(p.name), blocks.get(p.name))
                        rep = TensorReport(p.name, p.shape, "quantized", before, _nbytes(tensors), _rel_err(t, deq))
                        del deq
                        if on_tensor is not None:
                            on_tensor(p.name)
                    else:
                        tensors = {p.name: t}
                        rep = TensorReport(p.name, p.shape, f"kept ({p.reason})", before, before, None)
                    for k, v in tensors.items():
                        require(k not in shard, f"output name {k!r} is produced twice (does the source already hold it?)")
                        shard[k] = v
                        weight_map[k] = f
                    reports.append(rep)
            _save_shard(os.path.join(tmp, f), shard)
            del shard
        _write_side_files(src, folder, files, tmp, fmt, group_size, plans, weight_map, reports, layout)

    build_folder(out, build, overwrite=overwrite)
    return ConvertSummary(out, fmt, reports, layout)


def build_folder(out: str | os.PathLike, build: Callable[[str], object], *, overwrite: bool = False):
    """Run ``build(tmp)`` on a fresh temporary sibling of ``out``, then give it the umask's modes
    and rename it to ``out`` (replacing an existing ``out`` only with ``overwrite``); on any error
    or signal the temporary is removed and an existing ``out`` left as it was. Returns what
    ``build`` returns, its paths under ``tmp`` mapped to ``out``."""
    out = os.fspath(out)
    out_abs = os.path.abspath(out)
    parent = os.path.dirname(out_abs)
    if os.path.exists(out):
        require(overwrite, f"output {out!r} already exists (pass --overwrite to replace it)")
        require(os.path.isdir(out), f"output {out!r} exists and is not a directory")
    require(os.path.isdir(parent), f"the folder of the output, {parent!r}, "
            + ("is not a folder" if os.path.exists(parent) else "does not exist"))
    tmp = None
    try:
        with _signals_deferred():
            try:
                tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(out_abs)}.tmp-", dir=parent)
            except OSError as e:
                raise ValueError(f"cannot write the output {out!r} (its folder {parent!r}: {e.strerror or e})") from None
        result = build(tmp)
        _publish_modes(tmp)
        with _signals_deferred():
            if os.path.exists(out):
                old = tempfile.mkdtemp(prefix=f".{os.path.basename(out_abs)}.old-", dir=parent)
                os.replace(out, os.path.join(old, "x"))
                try:
                    os.replace(tmp, out)
                except BaseException:
                    os.replace(os.path.join(old, "x"), out)
                    os.rmdir(old)
                    raise
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, out)
            staged, tmp = tmp, None
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    if isinstance(result, (list, tuple)):
        return type(result)(os.path.join(out, os.path.relpath(os.fspath(r), staged)) if isinstance(r, (str, os.PathLike)) else r
                            for r in result)
    return result


def _module(name: str) -> str:
    return name[: -len(".weight")] if name.endswith(".weight") else name


def hf_quantization_config(fmt: str, layout: str | None = None, group_size: int = 64, ignore=(), quantized=()) -> dict | None:
    """The ``quantization_config`` :func:`convert` puts in ``config.json`` for ``fmt`` / ``layout``
    (None where there is none: lowbit's plane-split INTx and DeepSeek's FP4 experts). ``ignore``:
    the modules left unquantized; ``quantized``: those quantized (a quantized ``lm_head`` is named
    in compressed-tensors' targets: ``Linear`` does not match an engine's LM-head class)."""
    import lowbit

    layout = _layout(fmt, layout)
    if fmt == "fp8-block":
        cfg = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
        kept = [m for m in ignore if m != "lm_head"]  # vLLM's fp8 never quantizes the head
        return dict(cfg, ignored_layers=kept) if kept else cfg
    if fmt == "nvfp4":
        from lowbit.io.modelopt import modelopt_hf_quantization_config

        return modelopt_hf_quantization_config(ignore, producer_version=lowbit.__version__)
    if layout == "compressed-tensors":
        from lowbit.io.compressed_tensors import ct_quantization_config

        extra = ["lm_head"] if "lm_head" in quantized else []
        if fmt == "mxfp4":
            return ct_quantization_config("mxfp4", ignore=ignore, extra_targets=extra)
        return ct_quantization_config("int", num_bits=int(fmt[3:]), group_size=group_size, ignore=ignore, extra_targets=extra)
    return None


def _write_side_files(src, folder, files, tmp, fmt, group_size, plans, weight_map, reports, layout) -> None:
    import lowbit

    if os.path.isdir(src):
        for f in sorted(os.listdir(folder)):
            path = os.path.join(folder, f)
            if f.endswith(".safetensors") or f == INDEX_NAME or f.startswith(".") or not os.path.isfile(path):
                continue
            if f in (CONFIG_NAME, "hf_quant_config.json"):
                continue  # replaced below
            shutil.copy2(path, os.path.join(tmp, f))
        if os.path.isfile(os.path.join(folder, INDEX_NAME)):
            total = sum(os.path.getsize(os.path.join(tmp, f)) for f in files)
            _write_json(os.path.join(tmp, INDEX_NAME), {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})
    quantized = [_module(p.name) for p in plans if p.quantize]
    kept_linear = sorted(_module(p.name) for p in plans if not p.quantize and p.name.endswith(".weight") and len(p.shape) == 2)
    errs = [r.rel_err for r in reports if r.rel_err is not None]
    # an engine builds an LM head whether or not the checkpoint holds one (tied to the embedding):
    # a head that is not quantized here must be listed as such
    ignore = kept_linear + ([] if "lm_head" in quantized or "lm_head" in kept_linear else ["lm_head"])
    hf_cfg = hf_quantization_config(fmt, layout, group_size, ignore, quantized)
    _write_json(os.path.join(tmp, CONFIG_NAME), {
        "producer": {"name": "lowbit", "version": lowbit.__version__},
        "format": fmt,
        "group_size": {"nvfp4": 16, "mxfp4": 32, "fp8-block": 128}.get(fmt, group_size),
        "layout": layout,
        "vllm": vllm_support(fmt, layout, {_module(p.name): p.shape for p in plans if p.quantize})[1],
        "quantization_config": hf_cfg,
        "quantized_modules": quantized,
        "kept_2d_weights": kept_linear,
        "max_rel_err": max(errs) if errs else None,
    })
    if fmt == "nvfp4":
        from lowbit.io import modelopt_quant_config

        _write_json(os.path.join(tmp, "hf_quant_config.json"), modelopt_quant_config(exclude_modules=ignore))
    cfg_path = os.path.join(tmp, "config.json")
    if hf_cfg is not None and os.path.isfile(cfg_path):
        with open(cfg_path) as fh:
            try:
                cfg = json.load(fh)
            except json.JSONDecodeError:
                cfg = None
        if isinstance(cfg, dict):
            cfg["quantization_config"] = hf_cfg
            _write_json(cfg_path, cfg)


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"  # pragma: no cover


__all__ = ["FORMATS", "FUSED_SIBLINGS", "LAYOUTS", "ConvertSummary", "TensorPlan", "TensorReport", "build_folder", "convert",
           "fused_block_scales", "fused_groups", "hf_quantization_config", "human_bytes", "plan", "quantize_tensor", "vllm_support"]
