"""Bare-read floors: kernels that only read the bytes an op must read, launched and timed the way
the op is timed, in the same run.

A memory-bound op's floor is max(one launch, a bare read of its bytes): bytes / copy bandwidth
(measured on 2 GiB) is not reachable by one launch over a few MB, where the launch, the first DRAM
round trip and the tail dominate. Each read kernel XOR-reduces what it loaded and stores the
result, so no load is dead code; nothing else is computed. On sm_90 and later the reads launch as
programmatic dependent launches (the shipped decode kernels launch that way), so in a stack of
launches each one's launch overlaps the previous kernel.

Registered:

* ``read_floor`` -- weight streams. For the decode GEMMs (``fp8_gemm`` / ``fp4_gemm`` on
  ``lowbit.bench.gemm``'s five (N, K), M = 1 and 16) the weight bytes, and for the draft head's
  fast mode (INT2 / INT4 coarse copy of a 124160 x 5120 head, M = 1 / 8 / 16) its coarse bytes
  (``DraftHead.packing.nbytes``), read by a streaming kernel; op and read both timed as a layer
  stack (:func:`lowbit.bench.gemm.stack_us`: distinct weights back to back in one CUDA graph after
  an L2 flush, µs per call).
* ``read_floor_gathered`` -- ``gathered_bias``'s bytes (the gathered NVFP4 rows and their scales,
  x, values, indices, the written logits) on ``lowbit.bench.gathered``'s shapes, read by a
  gather-only kernel over the same indices; op and read both timed by CUDA-graph replay over 8
  rotating inputs (:func:`lowbit.bench.timing.time_us`), as that benchmark times the op.
* ``read_floor_sparse_attn`` -- ``sparse_attn`` decode's bytes (per query the top-k indices, the
  gathered KV rows -- bf16, or FP8 with their per-64 group scales -- q, and the written o) on
  ``lowbit.bench.sparse_attn``'s decode cases (m <= 2), read by a gather-only kernel over the same
  indices, skipping the -1 slots as the op does; op and read both timed by CUDA-graph replay over
  rotating input copies past L2, as that benchmark times the op's decode rows. The op's
  ``floor_us`` there is max(one launch, the bare read, FLOPs at the measured bf16 peak).

Per case: a ``"bare read"`` row (the fastest read geometry; every geometry's µs in
``extra["reads"]``) and the op's ``"lowbit ..."`` rows, whose ``floor_us`` is max(one launch, the
bare read), so "% of floor" reads as "% of what any kernel reaching these bytes this way achieves".
The helpers :func:`stream_read_us`, :func:`gathered_read_us` and :func:`attn_read_us` give the same
floor to other benchmarks.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from lowbit.bench.registry import BenchContext, Result, register

#: the streaming read's geometries: (words a program, warps)
STREAM_GEOMETRIES = ((2048, 4), (2048, 8), (4096, 4), (4096, 8), (8192, 4), (8192, 8))
#: the gathered read's geometries: (TT indices of one batch row a program, the row split in S
#: parts over programs, W warps)
GATHER_GEOMETRIES = ((1, 1, 4), (2, 1, 4), (4, 1, 4), (8, 1, 4), (8, 1, 8), (16, 1, 4), (16, 1, 8), (32, 1, 8),
                     (2, 2, 4), (4, 2, 4), (8, 2, 8), (4, 4, 4), (8, 4, 4), (16, 4, 8))
#: the sparse-attention read's geometries: (P parts of a query's top-k indices and heads, one
#: program each; TT indices (and q / o rows) a loop step; W warps)
ATTN_GEOMETRIES = ((1, 16, 8), (1, 32, 8), (2, 16, 8), (2, 32, 8), (4, 8, 4), (4, 16, 8), (8, 8, 4), (8, 16, 8),
                   (16, 4, 4), (16, 8, 4), (32, 4, 4), (32, 8, 4), (64, 2, 4), (64, 4, 4), (128, 2, 4))
#: the draft head's benchmark head (one rank of a ~248k vocabulary)
HEAD_NK = (124160, 5120)


@triton.jit
def _stream_read_kernel(src, out, n_words, BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    """Program p: XOR of the int32 words [p * BLOCK, (p + 1) * BLOCK) of src -> out[p]."""
    if PDL:  # nothing global before the wait; then the next PDL launch may start
        gdc_wait()
        gdc_launch_dependents()
    o_w = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    b_w = tl.load(src + o_w, mask=o_w < n_words, other=0)  # [BLOCK]
    tl.store(out + tl.program_id(0), tl.xor_sum(b_w, axis=0))


@triton.jit
def _gathered_read_kernel(x, values, index, packed, scale, logits, T, V,
                          KW: tl.constexpr, SW: tl.constexpr, XW: tl.constexpr, TT: tl.constexpr,
                          S: tl.constexpr, PDL: tl.constexpr = False):
    """Program (b, t block, part): the rows ``index[b, t block]``; reads part ``part`` of their
    packed words [KW / S] and scale words [SW / S] (part 0 all of them when SW < S), x[b]'s
    part and the values; stores XOR(words) & 0xFF + value into ``logits[b, row]`` as bf16 (a
    split row's parts all store: a bare read, not a reduction)."""
    i_b = tl.program_id(0).to(tl.int64)
    i_t = tl.program_id(1)
    part = tl.program_id(2)
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    o_t = i_t * TT + tl.arange(0, TT)
    m_t = o_t < T
    rows = tl.load(index + i_b * T + o_t, mask=m_t, other=0).to(tl.int64)  # [TT]
    o_k = part * (KW // S) + tl.arange(0, KW // S)
    b_w = tl.load(packed + rows[:, None] * KW + o_k[None, :], mask=m_t[:, None], other=0)  # [TT, KW / S]
    acc = tl.xor_sum(b_w, axis=1)
    if SW >= S:
        o_s = part * (SW // S) + tl.arange(0, SW // S)
        b_s = tl.load(scale + rows[:, None] * SW + o_s[None, :], mask=m_t[:, None], other=0)  # [TT, SW / S]
    else:
        o_s = tl.arange(0, SW)
        b_s = tl.load(scale + rows[:, None] * SW + o_s[None, :], mask=m_t[:, None] & (part == 0), other=0)
    acc ^= tl.xor_sum(b_s, axis=1)
    b_x = tl.load(x + i_b * XW + part * (XW // S) + tl.arange(0, XW // S))  # [XW / S]
    acc ^= tl.xor_sum(b_x, axis=0)
    b_v = tl.load(values + i_b * T + o_t, mask=m_t, other=0.0)  # [TT]
    out = (acc & 0xFF).to(tl.float32) + b_v
    tl.store(logits + i_b * V + rows, out.to(tl.bfloat16), mask=m_t)


@triton.jit
def _attn_read_kernel(q, kv, kv_scale, idx, o, M, N, T, H,
                      RW: tl.constexpr, SW: tl.constexpr, QW: tl.constexpr, KP: tl.constexpr, HP: tl.constexpr,
                      TT: tl.constexpr, QB: tl.constexpr, PDL: tl.constexpr = False):
    """Program (query b * M + m, part): the KP = topk / P indices [part * KP, (part + 1) * KP) of
    ``idx[b, m]`` in steps of TT, the kv rows they name (RW int32 words each, and SW scale words
    when SW > 0; -1 or out-of-range slots skipped, as the op skips them), then q's HP = h / P head
    rows [part * HP, (part + 1) * HP) in steps of QB; stores q's words XOR the XOR of everything
    else it read into o's words (each o word written once: a bare read, no arithmetic)."""
    i_bm = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    kv_row0 = (i_bm // M) * N  # the query's batch row of the cache
    o_w = tl.arange(0, RW)
    acc_w = tl.zeros([TT, RW], dtype=tl.int32)
    acc_i = tl.zeros([TT], dtype=tl.int32)
    if SW > 0:
        o_s = tl.arange(0, SW)
        acc_s = tl.zeros([TT, SW], dtype=tl.int32)
    for t0 in range(0, KP, TT):  # constexpr bounds (the interpreter wants no tensor bounds)
        o_t = part * KP + t0 + tl.arange(0, TT)
        m_t = t0 + tl.arange(0, TT) < KP
        rows = tl.load(idx + i_bm * T + o_t, mask=m_t, other=-1)  # [TT] int32; past the part: no row
        acc_i ^= tl.where(m_t, rows, 0)
        valid = (rows >= 0) & (rows < N)
        r64 = kv_row0 + rows.to(tl.int64)
        acc_w ^= tl.load(kv + r64[:, None] * RW + o_w[None, :], mask=valid[:, None], other=0)  # [TT, RW]
        if SW > 0:
            acc_s ^= tl.load(kv_scale + r64[:, None] * SW + o_s[None, :], mask=valid[:, None], other=0)
    acc = tl.xor_sum(tl.xor_sum(acc_w, axis=1), axis=0) ^ tl.xor_sum(acc_i, axis=0)
    if SW > 0:
        acc ^= tl.xor_sum(tl.xor_sum(acc_s, axis=1), axis=0)
    o_q = tl.arange(0, QW)
    for h0 in range(0, HP, QB):
        o_h = h0 + tl.arange(0, QB)
        m_h = o_h < HP
        off = (i_bm * H + part * HP + o_h.to(tl.int64))[:, None] * QW + o_q[None, :]
        b_q = tl.load(q + off, mask=m_h[:, None], other=0)  # [QB, QW]
        tl.store(o + off, b_q ^ acc, mask=m_h[:, None])


def _pdl(device) -> dict:
    """The launch keywords of a programmatic dependent launch where the GPU has one (sm_90+)."""
    from lowbit._backend import capability_at_least, interpret_mode

    if interpret_mode() or not capability_at_least(device, (9, 0)):
        return {}
    return {"PDL": True, "launch_pdl": True}


def stream_read(buf, out, block: int, warps: int):
    """A launch of the streaming read over the int32 words of ``buf`` (``out``: int32, one word a
    program, at least ``cdiv(buf.numel(), block)``)."""
    n = buf.numel()
    grid = (triton.cdiv(n, block),)
    kw = _pdl(buf.device)
    return lambda: _stream_read_kernel[grid](buf, out, n, BLOCK=block, num_warps=warps, **kw)


def stream_read_us(nbytes: int, layers: int, device="cuda") -> tuple[str, float, dict]:
    """(best geometry, its µs a layer, {geometry: µs}) of a bare streaming read of ``nbytes``
    bytes, over ``layers`` distinct buffers in the layer-stack timer (:func:`lowbit.bench.gemm.stack_us`)."""
    from lowbit.bench.gemm import stack_us

    words = -(-nbytes // 4)
    bufs = [torch.randint(-2**31, 2**31 - 1, (words,), dtype=torch.int32, device=device) for _ in range(layers)]
    outs = [torch.empty(triton.cdiv(words, min(b for b, _ in STREAM_GEOMETRIES)), dtype=torch.int32, device=device)
            for _ in range(layers)]
    times = {f"b{block} w{warps}": stack_us([stream_read(b, o, block, warps) for b, o in zip(bufs, outs)])
             for block, warps in STREAM_GEOMETRIES}
    best = min(times, key=times.get)
    return best, times[best], times


def gathered_read(w, inputs, logits, tt: int, s: int, warps: int):
    """A callable that launches the gathered read once per call, rotating over ``inputs`` ([(x bf16
    [B, K], values fp32 [B, T], index int64 [B, T])]) against the NVFP4 table ``w`` [V, K]; stores
    into ``logits`` [B, V] bf16 at the indices."""
    import itertools

    v, k = w.packed.shape[0], w.packed.shape[1] * 2
    packed = w.packed.view(torch.int32)
    scale = w.scale.view(torch.int32)
    kw, sw = packed.shape[1], scale.shape[1]
    it = itertools.cycle(inputs)
    opts = _pdl(packed.device)

    def run():
        x, values, idx = next(it)
        b, t = idx.shape
        _gathered_read_kernel[(b, triton.cdiv(t, tt), s)](x.view(torch.int32), values, idx, packed, scale, logits, t, v,
                                                          KW=kw, SW=sw, XW=k // 2, TT=tt, S=s, num_warps=warps, **opts)
    return run


def gathered_geometries(k: int, t: int):
    """The gathered read's geometries that fit T indices a batch row and K (an S-way split of the
    row's K / 8 packed words)."""
    return [(tt, s, w) for tt, s, w in GATHER_GEOMETRIES if tt <= 2 * t and (k // 8) % s == 0]


def gathered_read_us(w, inputs, logits) -> tuple[str, float, dict]:
    """(best geometry, its µs, {geometry: µs}) of the bare gathered read over ``inputs`` (as
    :func:`gathered_read`), each geometry timed by CUDA-graph replay."""
    from lowbit.bench.timing import time_us

    b, t = inputs[0][2].shape
    k = inputs[0][0].shape[1]
    times = {f"tt{tt} s{s} w{warps}": time_us(gathered_read(w, inputs, logits, tt, s, warps), graph=True)
             for tt, s, warps in gathered_geometries(k, t)}
    best = min(times, key=times.get)
    return best, times[best], times


def attn_geometries(topk: int, h: int):
    """The sparse-attention read's geometries whose P parts divide the top-k indices and the heads."""
    return [(p, tt, w) for p, tt, w in ATTN_GEOMETRIES if topk % p == 0 and h % p == 0]


def attn_read(copies, o, p: int, tt: int, warps: int):
    """A callable that launches the sparse-attention bare read once per call, taking the next of
    ``copies`` (a list, cycled, or an iterator such as :func:`lowbit.bench.timing.rotating`'s) of
    ``sparse_attn``'s inputs (q bf16 [b, m, h, d], kv bf16 or float8_e4m3fn [b, n, d], attn_sink,
    topk_idxs int32 [b, m, topk], kv_scale fp32 [b, n, d / 64] or None); writes ``o`` (bf16
    [b, m, h, d]). Grid (b * m, P)."""
    import itertools

    first = copies[0] if isinstance(copies, (list, tuple)) else None
    it = itertools.cycle(copies) if first is not None else copies
    if first is not None:
        q, kv, _, idx, _ = first
        if idx.dtype != torch.int32:
            raise ValueError(f"topk_idxs must be int32, got {idx.dtype}")
        b, m, h, d = q.shape
        topk = idx.shape[2]
        if topk % p or h % p:
            raise ValueError(f"p={p} must divide topk={topk} and h={h}")
        if d & (d - 1) or (d * kv.element_size()) % 4:
            raise ValueError(f"head dim d={d} must be a power of two of whole int32 words")
    if o.dtype != torch.bfloat16 or o.dim() != 4:
        raise ValueError(f"o must be bf16 [b, m, h, d], got {o.dtype} {tuple(o.shape)}")
    out = o.view(torch.int32)
    opts = _pdl(o.device)

    def run():
        q, kv, _, idx, kv_scale = next(it)
        b, m, h, d = q.shape
        n, topk = kv.shape[1], idx.shape[2]
        kvw = kv.view(torch.int32)
        scw = kv_scale.view(torch.int32) if kv_scale is not None else kvw
        sw = scw.shape[2] if kv_scale is not None else 0
        qb = min(tt, triton.next_power_of_2(max(h // p, 1)))
        _attn_read_kernel[(b * m, p)](q.view(torch.int32), kvw, scw, idx, out, m, n, topk, h,
                                      RW=kvw.shape[2], SW=sw, QW=d // 2, KP=topk // p, HP=h // p, TT=tt, QB=qb,
                                      num_warps=warps, **opts)
    return run


def attn_read_us(copies, o) -> tuple[str, float, dict]:
    """(best geometry, its µs, {geometry: µs}) of the sparse-attention bare read over ``copies``
    (as :func:`attn_read`) into ``o``, each geometry timed by CUDA-graph replay
    (``time_us(graph=True)``, as ``lowbit.bench.sparse_attn`` times the op's decode rows)."""
    from lowbit.bench.timing import time_us

    _, _, h, _ = o.shape
    first = copies[0] if isinstance(copies, (list, tuple)) else next(copies)
    topk = first[3].shape[2]
    times = {f"p{p} tt{tt} w{warps}": time_us(attn_read(copies, o, p, tt, warps), graph=True)
             for p, tt, warps in attn_geometries(topk, h)}
    best = min(times, key=times.get)
    return best, times[best], times


def _read_row(op: str, case: str, nbytes: int, best: str, us: float, times: dict, timing: str) -> Result:
    return Result(op, case, "bare read", us, bytes=nbytes,
                  extra={"geometry": best, "reads": {g: round(t, 3) for g, t in times.items()}, "timing": timing})


@register("read_floor", description="bare-read floors of the decode GEMMs' weights and the fast draft head's "
                                    "coarse copy, timed as a layer stack with the ops")
def run_stream(ctx: BenchContext) -> list[Result]:
    from lowbit import DraftHead
    from lowbit.bench.gemm import NK, STACK_LAYERS, decode_layers, gemm_bytes, stack_us
    from lowbit.ops import fp4_gemm, fp8_gemm

    one = torch.zeros(1, device="cuda")

    def launch_us(layers: int) -> float:  # one tiny kernel a layer, in the same timer
        return stack_us([lambda: one.add_(1.0)] * layers)

    launch = launch_us(STACK_LAYERS)
    results: list[Result] = []
    nks = [(7168, 2048), (2112, 7168)] if ctx.quick else list(NK)
    for op, fp4 in (("fp8_gemm", False), ("fp4_gemm", True)):
        for n, k in nks:
            case = f"{op} N{n} K{k}"
            nbytes = gemm_bytes(1, n, k, fp4)
            best, read_us, times = stream_read_us(nbytes, STACK_LAYERS)
            floor = max(launch, read_us)
            results.append(_read_row("read_floor", case, nbytes, best, read_us, times, "layer stack"))
            for m in (1,) if ctx.quick else (1, 16):
                layers = decode_layers(m, n, k, fp4, STACK_LAYERS)
                call = [(lambda a=a, wq=wq: fp4_gemm(a.data, a.scale, wq.packed, wq.scale)) if fp4 else
                        (lambda a=a, wq=wq: fp8_gemm(a.data, a.scale, wq.data, wq.scale)) for a, wq, _, _ in layers]
                results.append(Result("read_floor", case, f"lowbit M{m}", stack_us(call), bytes=gemm_bytes(m, n, k, fp4),
                                      flops=2 * m * n * k, extra={"floor_us": floor, "launch_us": launch,
                                                                  "timing": "layer stack"}))
                del layers, call
            torch.cuda.empty_cache()
    n, k = HEAD_NK
    torch.manual_seed(0)
    w = (torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16)
    heads_layers = 2  # each coarse copy (80-160 MB) is over L2 alone
    for bits in (2, 4):
        heads = [DraftHead(w, mode="fast", bits=bits) for _ in range(heads_layers)]  # distinct coarse copies
        ms = (1,) if ctx.quick else (1, 8, 16)
        for h in heads:
            h.warmup(max_m=max(ms), ks=(1,))
        nbytes = heads[0].packing.nbytes
        case = f"draft_head fast int{bits} {n}x{k}"
        best, read_us, times = stream_read_us(nbytes, heads_layers)
        launch = launch_us(heads_layers)
        floor = max(launch, read_us)
        results.append(_read_row("read_floor", case, nbytes, best, read_us, times, "layer stack"))
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            us = stack_us([lambda h=h: h.argmax(x) for h in heads])
            results.append(Result("read_floor", case, f"lowbit M{m} argmax", us, bytes=nbytes + m * k * 2,
                                  flops=2 * m * n * k, extra={"floor_us": floor, "launch_us": launch,
                                                              "timing": "layer stack"}))
        del heads
        torch.cuda.empty_cache()
    return results


@register("read_floor_gathered", description="bare-read floor of NVFP4 gathered_bias (the gathered rows, x, values, "
                                             "indices, logits), timed by graph replay with the op")
def run_gathered(ctx: BenchContext) -> list[Result]:
    import itertools

    from lowbit.bench.gathered import FULL, QUICK, V
    from lowbit.bench.timing import launch_us, time_us
    from lowbit.formats import NVFP4
    from lowbit.ops import gathered_bias

    launch = launch_us()
    shapes = QUICK if ctx.quick else FULL
    results: list[Result] = []
    for k in sorted({s[0] for s in shapes}):
        w = NVFP4.quantize(torch.randn(V, k, device="cuda") * 0.02)
        for _, b, t in [s for s in shapes if s[0] == k]:
            inputs = [(torch.randn(b, k, device="cuda", dtype=torch.bfloat16), torch.randn(b, t, device="cuda"),
                       torch.randint(0, V, (b, t), device="cuda")) for _ in range(8)]
            logits = torch.full((b, V), float("-inf"), device="cuda", dtype=torch.bfloat16)
            nbytes = b * t * (k // 2 + k // 16) + b * k * 2 + b * t * (4 + 8) + b * t * 2
            case = f"K{k} B{b} T{t}"
            best, read_us, times = gathered_read_us(w, inputs, logits)
            results.append(_read_row("read_floor_gathered", case, nbytes, best, read_us, times, "graph"))
            it = itertools.cycle(inputs)

            def fused():
                x, values, idx = next(it)
                gathered_bias(x, w, values, idx, logits)

            results.append(Result("read_floor_gathered", case, "lowbit", time_us(fused, graph=True), bytes=nbytes,
                                  flops=2 * b * t * k, extra={"floor_us": max(launch, read_us), "launch_us": launch,
                                                              "timing": "graph"}))
        torch.cuda.empty_cache()
    return results


@register("read_floor_sparse_attn", description="bare-read floor of sparse_attn decode (indices, gathered KV rows "
                                                "and scales, q, o), timed by graph replay with the op")
def run_sparse_attn(ctx: BenchContext) -> list[Result]:
    from lowbit.bench.sparse_attn import D, _attn_cases, case_bytes_flops, case_copies
    from lowbit.bench.timing import L2_BYTES, launch_us, time_us
    from lowbit.ops.sparse_attn import sparse_attn

    dev = ctx.device
    launch = launch_us(dev)
    results: list[Result] = []
    for m, b, h, topk, fp8 in [c for c in _attn_cases(ctx.quick) if c[0] <= 2]:
        nbytes, flops = case_bytes_flops(m, b, h, topk, fp8)
        copies = case_copies(m, b, h, topk, fp8, dev, min_total=4 * L2_BYTES)
        case = f"decode m{m} b{b} h{h} top{topk}{' fp8kv' if fp8 else ''}"
        o = torch.empty(b, m, h, D, device=dev, dtype=torch.bfloat16)
        best, read_us, times = attn_read_us(copies, o)
        results.append(_read_row("read_floor_sparse_attn", case, nbytes, best, read_us, times, "graph"))
        scale = D**-0.5

        def ours():
            q, kv, sink, idx, kv_scale = next(copies)
            return sparse_attn(q, kv, sink, idx, scale, kv_scale=kv_scale)

        ours()  # compile outside any graph capture
        flops_us = flops / (ctx.bf16_tflops * 1e6)
        results.append(Result("read_floor_sparse_attn", case, "lowbit", time_us(ours, graph=True), bytes=nbytes,
                              flops=flops, extra={"floor_us": max(launch, read_us, flops_us), "launch_us": launch,
                                                  "read_us": read_us, "flops_us": flops_us, "timing": "graph"}))
        del copies, o
        torch.cuda.empty_cache()
    return results
