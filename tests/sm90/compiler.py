"""Compile Triton kernels for sm_90 on a machine without a GPU, and read the cubin back.

Shared by the offline compile checks in this folder (``tests/ops/test_sm90_offline_compile.py``
runs them): they catch what the interpreter accepts but the sm_90 compiler rejects, and report
registers / spills. ``TRITON_INTERPRET`` must be unset before Triton is imported (``compile_sm90``
drops it).
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections import Counter


def compile_sm90(fn, signature: dict, constexprs: dict, divisible=(), num_warps: int = 4, num_stages: int | None = None,
                 **options):
    """``triton.compile`` of the @triton.jit ``fn`` for sm_90. ``signature`` maps argument names to
    Triton types ("*fp32", "i32", "constexpr", ...); ``divisible`` lists the argument indices the
    launch would specialise as divisible by 16; ``options``: further compile options (``maxnreg``)."""
    os.environ.pop("TRITON_INTERPRET", None)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    options = {"num_warps": num_warps, **options}
    if num_stages is not None:
        options["num_stages"] = num_stages
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs,
                    attrs={(i,): [["tt.divisibility", 16]] for i in divisible})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def compile_gluon_sm90(fn, args: dict, constexprs: dict, no_specialize=(), num_warps: int = 4, **options):
    """``triton.compile`` of the @gluon.jit (or @triton.jit) ``fn`` for sm_90, its signature derived
    from example arguments the way a launch would (``args``: name -> tensor / TensorDescriptor /
    int, in any order; ``no_specialize``: the names the kernel declares ``do_not_specialize``)."""
    os.environ.pop("TRITON_INTERPRET", None)
    import triton
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend, GPUTarget
    from triton.compiler import ASTSource
    from triton.experimental.gluon._runtime import GluonASTSource, GluonJITFunction

    signature, attrs, constexprs = {}, {}, dict(constexprs)
    for name, v in args.items():
        ty, key = native_specialize_impl(BaseBackend, v, False, name not in no_specialize, True)
        signature[name] = ty
        if ty == "constexpr":  # an integer 1 specializes to the constant, as at launch
            constexprs[name] = v
        if key == "D":
            attrs[(fn.arg_names.index(name),)] = [["tt.divisibility", 16]]
    for name in constexprs:
        signature[name] = "constexpr"
    signature = {p: signature[p] for p in fn.arg_names}
    src = (GluonASTSource if isinstance(fn, GluonJITFunction) else ASTSource)(fn, signature, constexprs, attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps, **options})


class Recorder:
    """Stands in for a jitted kernel: ``kernel[grid](*args, **kwargs)`` appends ``(kernel, args,
    kwargs)`` to ``seen`` instead of launching -- so a library launcher run on CPU stand-ins tells
    which kernels, with which arguments and constexprs, it would launch (:func:`compile_launch`)."""

    def __init__(self, fn, seen: list):
        self.fn, self.seen = fn, seen

    def __getitem__(self, grid):
        return lambda *a, **kw: self.seen.append((self.fn, a, kw))


def record_launches(call, kernels: list[tuple[object, str]], patches: list[tuple[object, str, object]] = ()) -> list:
    """Run ``call()`` with each ``(module, name)`` kernel of ``kernels`` replaced by a
    :class:`Recorder` and the ``(module, name, value)`` of ``patches`` set (e.g. an SM count, a
    preparation kernel's outputs), everything restored after; the recorded launches."""
    seen = []
    saved = [(mod, name, getattr(mod, name)) for mod, name in kernels] + [(mod, name, getattr(mod, name))
                                                                          for mod, name, _ in patches]
    try:
        for mod, name in kernels:
            setattr(mod, name, Recorder(getattr(mod, name), seen))
        for mod, name, value in patches:
            setattr(mod, name, value)
        call()
    finally:
        for mod, name, value in reversed(saved):
            setattr(mod, name, value)
    return seen


#: (N, K) of the benchmark's GEMMs (``lowbit.bench``'s fp8_gemm / fp4_gemm shapes)
DECODE_SHAPES = ((2112, 7168), (24576, 1536), (7168, 16384), (4096, 7168), (7168, 2048))


_LAUNCH_OPTIONS = ("num_warps", "maxnreg", "num_stages", "num_ctas", "ptx_options")


def _launch_parts(fn, args: tuple, kwargs: dict) -> tuple[dict, dict, dict]:
    """(runtime arguments, constexprs, compile options) of a recorded launch of ``fn``: its
    positional and keyword arguments split the way the launch specializes them (None and unset
    parameters as constexpr defaults), ``launch_pdl`` dropped (a launch attribute, not a compile
    option)."""
    params = {q.name: q for q in fn.params}
    run, constexprs, opts = {}, {}, {}
    for name, v in zip(fn.arg_names, args):  # a constexpr may be passed by position too
        (constexprs if params[name].is_constexpr else run)[name] = v
    for name, v in kwargs.items():
        if name in _LAUNCH_OPTIONS:
            opts[name] = v
            if name in params:  # a kernel may take ``num_warps`` as a constexpr too
                constexprs[name] = v
        elif name != "launch_pdl":
            (constexprs if params[name].is_constexpr else run)[name] = v
    for q in fn.params:
        if q.name not in run and q.name not in constexprs:
            (constexprs if q.is_constexpr or q.default is None else run)[q.name] = q.default
    for name in [a for a, v in run.items() if v is None]:
        constexprs[name] = run.pop(name)
    return run, constexprs, opts


def compile_launch(fn, args: tuple, kwargs: dict):
    """Compile a recorded launch (:class:`Recorder`) of the @gluon.jit / @triton.jit ``fn`` for sm_90,
    specialized as the launch would be (:func:`_launch_parts`)."""
    run, constexprs, opts = _launch_parts(fn, args, kwargs)
    nospec = {q.name for q in fn.params if q.do_not_specialize}
    return compile_gluon_sm90(fn, run, constexprs, nospec, num_warps=opts.pop("num_warps", 4), **opts)


def distinct_launches(launches: list) -> list:
    """The recorded launches that would compile to different kernels, each once (in order): the
    same kernel, constexprs, options and runtime-argument specialization (dtypes, 16-byte
    alignment, integers equal to 1 or divisible by 16) compile to the same binary."""
    import torch

    def spec(v):
        if isinstance(v, torch.Tensor):
            return (str(v.dtype), v.data_ptr() % 16 == 0)
        if isinstance(v, bool) or not isinstance(v, int):
            return (type(v).__name__, v if isinstance(v, (bool, float)) else None)
        return ("int", v == 1, v % 16 == 0)

    seen, out = set(), []
    for fn, args, kwargs in launches:
        run, constexprs, opts = _launch_parts(fn, args, kwargs)
        key = (id(fn), tuple((a, spec(v)) for a, v in run.items()), repr(sorted(constexprs.items())),
               repr(sorted(opts.items())))
        if key not in seen:
            seen.add(key)
            out.append((fn, args, kwargs))
    return out


def compile_recorded(launches: list, label, needs: str | None = None) -> int:
    """Compile each recorded launch (:func:`record_launches`) and print one line: ``label(kernel,
    kwargs)``, registers / spills, ptxas's wgmma notes and, with ``needs`` (a SASS opcode such as
    "IGMMA"), whether the cubin has it. Returns how many failed to compile or lack ``needs``."""
    failed = 0
    for fn, args, kwargs in launches:
        name = label(fn, kwargs)
        try:
            kern = compile_launch(fn, args, kwargs)
        except Exception as e:  # noqa: BLE001 - report every launch
            print(f"{name}: FAILED {root_cause(e)}", flush=True)
            failed += 1
            continue
        has = needs is None or needs in cuobjdump(kern, "-sass")
        notes = " ".join(ptxas_notes(kern))
        print(f"{name}: {resource_usage(kern)}" + (f" {needs} {'yes' if has else 'MISSING'}" if needs else "")
              + (f" {notes}" if notes else ""), flush=True)
        failed += not has
    return failed


def cuobjdump(kernel, *args: str) -> str:
    """Output of Triton's bundled ``cuobjdump ARGS`` on the kernel's cubin ("" if it is missing)."""
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.path.exists(tool):
        return ""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        return subprocess.run([tool, *args, f.name], capture_output=True, text=True).stdout


def ptxas_notes(kernel) -> list[str]:
    """ptxas's performance notes on the kernel's PTX (``ptxas -v``, e.g. C7513: wgmma serialized
    because a register input is defined after the first wgmma of a pipeline stage)."""
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    if not os.path.exists(tool):
        return []
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(kernel.asm["ptx"])
        out = subprocess.run([tool, "-arch=sm_90a", "-v", src, "-o", os.path.join(d, "k.cubin")],
                             capture_output=True, text=True).stderr
    return [line.split(":", 1)[1].strip() for line in out.splitlines() if "Performance" in line]


def resource_usage(kernel) -> str:
    """"REG:n STACK:n SHARED:n LOCAL:n" from ``cuobjdump -res-usage`` (spills show as STACK / LOCAL)."""
    return " ".join(re.findall(r"(?:REG|STACK|SHARED|LOCAL):\d+", cuobjdump(kernel, "-res-usage")))


def sass_opcodes(kernel) -> list[str]:
    """The SASS instructions' opcodes (with modifiers, predicates dropped), in order."""
    return re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", cuobjdump(kernel, "-sass"))


def sass_lines(sass: str) -> list[tuple[int, str, str]]:
    """(address, opcode without predicate, operands) of every SASS instruction."""
    out = []
    for a, op, rest in re.findall(r"/\*([0-9a-f]{4,})\*/\s+((?:@!?U?P\w+\s+)?[A-Z][A-Z0-9_.]*)([^;]*);", sass):
        out.append((int(a, 16), re.sub(r"^@!?U?P\w+\s+", "", op), rest.strip()))
    return out


def loop_body(lines: list[tuple[int, str, str]], needs: str = "HMMA") -> list[tuple[int, str, str]]:
    """The instructions (``sass_lines`` rows) of the longest backward-branch region that holds an
    opcode starting with ``needs``: a kernel's main loop."""
    addr = [a for a, _, _ in lines]
    best: list[tuple[int, str, str]] = []
    for i, (a, op, rest) in enumerate(lines):
        m = re.search(r"0x([0-9a-f]+)", rest) if op.startswith("BRA") else None
        if not m or int(m.group(1), 16) >= a or int(m.group(1), 16) not in addr:
            continue
        body = lines[addr.index(int(m.group(1), 16)):i + 1]
        if any(o.startswith(needs) for _, o, _ in body) and len(body) > len(best):
            best = body
    return best


def root_cause(e: BaseException) -> str:
    """"Type: message" of the innermost cause (the compiler wraps its errors)."""
    while e.__cause__ is not None:
        e = e.__cause__
    return f"{type(e).__name__}: {str(e)[-400:]}"


def loop_report(kernel, label: str, loop_of, extra: str = "", top: int = 16, dump_dir: str | None = None,
                dump_name: str | None = None) -> list[str]:
    """Print ``label``, the kernel's resources and shared memory, the length and opcode counts of
    its main loop (``loop_of``: ``sass_lines`` rows -> the loop's opcodes; ``extra`` is formatted
    with ``n`` = that length); write the SASS to ``dump_dir/dump_name`` if given. Returns the
    loop's opcodes."""
    sass = cuobjdump(kernel, "-sass")
    ops = loop_of(sass_lines(sass))
    print(f"{label}: {resource_usage(kernel)}, smem {kernel.metadata.shared} B; loop {len(ops)} instr"
          + extra.format(n=len(ops)))
    print("   ", ", ".join(f"{k} {v}" for k, v in Counter(o.split(".")[0] for o in ops).most_common(top)))
    if dump_dir:
        os.makedirs(dump_dir, exist_ok=True)
        with open(os.path.join(dump_dir, dump_name), "w") as f:
            f.write(sass)
    return ops
