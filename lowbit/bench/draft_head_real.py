"""Benchmark: :class:`lowbit.DraftHead` on a real model's LM head and hidden states (SmolLM2-135M:
a 49152 x 576 head) against cuBLAS bf16 ``F.linear`` + ``argmax``, same run, same rows.

The data file holds ``{"hidden": bf16 [P, 576], "weight": bf16 [49152, 576], "model": str}``:
the model's final hidden states over a shipped text sample and its own greedy continuations, and
its head. A GPU machine usually cannot load the model, so write the file where it can
(``python scripts/real_head_data.py .realhead/smollm2_head.pt.xz``) and bring it along. It is
read from ``$LOWBIT_REAL_HEAD``, else ``.realhead/smollm2_head.pt.xz`` under the working
directory; without it the benchmark is skipped with that instruction.

Per M, 32 batches of M consecutive positions; every implementation answers every batch. Timed by
CUDA-graph replay (:func:`lowbit.bench.timing.cold_graph_us`: per batch the rows are copied in and
L2 flushed outside the timed region, so certified set sizes and fallbacks are what the real data
make them), and eagerly (``extra["eager_us"]``: one call between two synchronizations, host
launch cost included; ``extra["eager_graphs_us"]`` the same with ``eager_graphs=True``, the head
replaying its own recorded graph, and ``eager_graphs_same`` whether its answers equal the plain
head's). ``extra`` also carries the argmax agreement with the fp32 logits, and for
certified heads the set sizes, fallback rows, recall of the exact top-16, the top-16 call's graph
time, set sizes and fallback rate, and the agreement of the argmax and of the top-16 set with
the fp64 logits over every position in batches of M.

Floors, same timer: a ``"bare read"`` row per case reads the certified head's INT8 coarse copy
(what its coarse pass must read) with the streaming read of :mod:`lowbit.bench.read_floor`, and
``extra["bf16_read_us"]`` the bf16 weight (what cuBLAS must read); each is the fastest of the
read's geometries. The certified rows carry ``floor_us`` = that coarse-copy read, and
``coarse_pass_us``: the INT8 coarse pass alone (the argmax's candidates a block, the deterministic
bound), what the certified path pays before its tail, whichever route the argmax takes.
"""
from __future__ import annotations

import os

from lowbit.bench.registry import BenchContext, Result, Skip, register

#: the environment variable naming the data file, and where it is looked for otherwise
ENV = "LOWBIT_REAL_HEAD"
DEFAULT_PATH = os.path.join(".realhead", "smollm2_head.pt.xz")
#: the configurations timed (DraftHead keyword arguments)
CONFIGS = {
    "certified int8 g64": dict(mode="certified", bits=8, group_size=64),
    "fast int4 g64": dict(mode="fast", bits=4, group_size=64),
    "fast int2 g64 k8 r64": dict(mode="fast", bits=2, group_size=64, kcand=8, rerank=64),
}
MS = (1, 4, 16, 32, 64)
QUICK_MS = (1, 16, 64)
BATCHES = 32
TOPK = 16


def data_path() -> str:
    return os.environ.get(ENV) or DEFAULT_PATH


def save(path: str, hidden, weight, model: str) -> int:
    """Write hidden states and head weight (both as contiguous bf16) xz-compressed; the bytes written."""
    import io
    import lzma

    import torch

    buf = io.BytesIO()
    torch.save({"hidden": hidden.to(torch.bfloat16).contiguous(), "weight": weight.to(torch.bfloat16).contiguous(),
                "model": model}, buf)
    with lzma.open(path, "wb", preset=6) as f:
        f.write(buf.getvalue())
    return len(buf.getvalue())


def load(path: str) -> dict:
    """The dict :func:`save` wrote (CPU tensors)."""
    import io
    import lzma

    import torch

    with lzma.open(path, "rb") as f:
        return torch.load(io.BytesIO(f.read()), map_location="cpu", weights_only=True)


def load_or_skip(path: str | None = None) -> dict:
    """:func:`load` of ``path`` (default :func:`data_path`), or :class:`~lowbit.bench.registry.Skip`
    saying how to write the file when it is absent or not such a file."""
    path = path or data_path()
    how = (f"write it with `python scripts/real_head_data.py {path}` on a machine that can load SmolLM2 "
           f"(or point ${ENV} at one)")
    if not os.path.isfile(path):
        raise Skip(f"no real-head data at {path}: {how}")
    try:
        blob = load(path)
    except Exception as e:  # noqa: BLE001 - any unreadable file gets the same instruction
        raise Skip(f"{path} is not a real-head data file ({type(e).__name__}: {e}): {how}") from None
    if not (isinstance(blob, dict) and {"hidden", "weight"} <= blob.keys()):
        raise Skip(f"{path} is not a real-head data file (needs 'hidden' and 'weight'): {how}")
    return blob


def _eager_us(fn, xs) -> float:
    """Median µs of one ``fn(x)`` between two synchronizations (host launch cost included)."""
    import statistics

    import torch

    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    times = []
    for _ in range(3):
        for x in xs:
            torch.cuda.synchronize()
            ev[0].record()
            fn(x)
            ev[1].record()
            torch.cuda.synchronize()
            times.append(ev[0].elapsed_time(ev[1]) * 1e3)
    return statistics.median(times)


@register("draft_head_real", description="DraftHead on SmolLM2-135M's real head and hidden states vs cuBLAS bf16 "
                                         "(needs the file of scripts/real_head_data.py)")
def run(ctx: BenchContext) -> list[Result]:
    blob = load_or_skip()
    import torch
    import torch.nn.functional as F

    from lowbit import DraftHead
    from lowbit.bench.read_floor import STREAM_GEOMETRIES, stream_read
    from lowbit.bench.timing import cold_graph_us
    from lowbit.ops.coarse_head import BOUND_DET, coarse_head

    w = blob["weight"].cuda()
    hidden = blob["hidden"].cuda()
    n, k = w.shape
    model = str(blob.get("model", "real head"))
    ms = QUICK_MS if ctx.quick else MS
    heads = {name: DraftHead(w, **kw) for name, kw in CONFIGS.items()}
    graphed = {name: DraftHead(w, **kw, eager_graphs=True) for name, kw in CONFIGS.items()}
    for h in [*heads.values(), *graphed.values()]:
        h.warmup(max_m=max(ms), ks=(1, TOPK))
    logits64 = hidden.double() @ w.double().t()
    ref64 = logits64.argmax(-1)  # ties to the lower index, as the head's
    ref_top = logits64.topk(TOPK, dim=-1).indices.sort(-1).values  # the exact top-k as a set
    del logits64

    def read_us(nbytes: int) -> float:  # the fastest streaming read of nbytes, in the op's timer (M-independent)
        buf = torch.randint(-2**31, 2**31 - 1, (-(-nbytes // 4),), dtype=torch.int32, device=w.device)
        out = torch.empty(-(-buf.numel() // min(b for b, _ in STREAM_GEOMETRIES)), dtype=torch.int32, device=w.device)
        xs = [hidden[:1]] * BATCHES
        return min(cold_graph_us(lambda x, f=stream_read(buf, out, b, wp): f(), xs) for b, wp in STREAM_GEOMETRIES)

    coarse_bytes = heads["certified int8 g64"].packing.nbytes
    floor, bf16_read = read_us(coarse_bytes), read_us(n * k * 2)
    results: list[Result] = []
    for m in ms:
        case = f"{n}x{k} M{m}"
        starts = torch.linspace(0, hidden.shape[0] - m, BATCHES).long().tolist()
        xs = [hidden[s:s + m] for s in starts]
        exact = [(x.float() @ w.float().t()).argmax(-1) for x in xs]

        def agreement(fn) -> float:
            return sum(int((fn(x) == e).sum()) for x, e in zip(xs, exact)) / (m * BATCHES)

        def lin(x):
            return F.linear(x, w).argmax(-1)

        bf16_bytes = n * k * 2 + m * k * 2
        results.append(Result("draft_head_real", case, "bare read", floor, coarse_bytes,
                              extra={"of": "the certified head's INT8 coarse copy", "timing": "graph, cold L2",
                                     "bf16_read_us": bf16_read}))
        t_lin = cold_graph_us(lin, xs)
        results.append(Result("draft_head_real", case, "cuBLAS bf16 + argmax", t_lin, bf16_bytes, 2 * m * n * k,
                              extra={"eager_us": _eager_us(lin, xs), "agreement_vs_fp32": agreement(lin),
                                     "timing": "graph, cold L2", "model": model}))
        for name, h in heads.items():
            h.reset_stats()
            extra = {"agreement_vs_fp32": agreement(h.argmax)}
            st = h.stats
            extra.update(eager_us=_eager_us(h.argmax, xs), timing="graph, cold L2", model=model)
            g = graphed[name]
            extra["eager_graphs_us"] = _eager_us(g.argmax, xs)  # eager calls replaying the head's own graph
            extra["eager_graphs_same"] = all(torch.equal(g.argmax(x), h.argmax(x)) for x in xs)
            if h.mode == "certified":
                extra["floor_us"] = floor
                extra["coarse_pass_us"] = cold_graph_us(
                    lambda x, h=h: coarse_head(x, h.packing, block=h.block, kcand=h.kcand, bound=BOUND_DET), xs)
                extra.update(mean_set=st["mean_set_size"], max_set=st["max_set_size"], fallback_rows=st["fallbacks"])
                hits = 0
                for x in xs:
                    ref16 = (x.float() @ w.float().t()).topk(TOPK, dim=-1).indices
                    hits += int((h.topk(x, TOPK)[1][:, :, None] == ref16[:, None, :]).any(-1).sum())
                extra[f"recall{TOPK}"] = hits / (TOPK * m * BATCHES)
                h.reset_stats()
                extra[f"top{TOPK}_graph_us"] = cold_graph_us(lambda x: h.topk(x, TOPK), xs)
                st = h.stats
                extra.update({f"top{TOPK}_mean_set": st["mean_set_size"], f"top{TOPK}_max_set": st["max_set_size"],
                              f"top{TOPK}_fallback_rate": st["fallback_rate"],
                              f"top{TOPK}_rescan_rate": st["rescans"] / max(st["rows"], 1)})
                same = sum(int((h.topk(hidden[s:s + m], TOPK)[1].sort(-1).values == ref_top[s:s + m]).all(-1).sum())
                           for s in range(0, hidden.shape[0] - m + 1, m))
                extra[f"top{TOPK}_set_agreement_vs_fp64_all_positions"] = same / (hidden.shape[0] // m * m)
                agree = sum(int((h.argmax(hidden[s:s + m]) == ref64[s:s + m]).sum())
                            for s in range(0, hidden.shape[0] - m + 1, m))
                extra["agreement_vs_fp64_all_positions"] = agree / (hidden.shape[0] // m * m)
            us = cold_graph_us(h.argmax, xs)
            results.append(Result("draft_head_real", case, f"lowbit {name} argmax", us, h.packing.nbytes + m * k * 2,
                                  2 * m * n * k, extra=extra))
    return results
