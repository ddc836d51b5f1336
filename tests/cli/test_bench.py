"""lowbit bench: the report (table / JSON / PNG) on fake rows, and the CLI's errors on a CPU machine."""
from __future__ import annotations

import json

import pytest
import torch

import lowbit
from lowbit.bench import report, runner
from lowbit.bench.registry import BenchContext, Result
from lowbit.cli import main
from tests.cli._tiny import needs_matplotlib

CTX = BenchContext(copy_gbps=4000.0, bf16_tflops=700.0, fp8_tflops=1200.0, quick=True)


def _rows():
    return [
        Result("lm_head", "M1 V49152 K576", "lowbit int4", us=20.0, bytes=16_000_000),
        Result("lm_head", "M1 V49152 K576", "cuBLAS bf16", us=25.0, bytes=56_000_000),
        Result("lm_head", "M1 V49152 K576", "fp8 rowwise", us=40.0, bytes=28_000_000),
        Result("gemm", "4096^3", "lowbit fp8", us=200.0, flops=2 * 4096**3, extra={"peak": "fp8"}),
        Result("gemm", "4096^3", "torch bf16", us=300.0, flops=2 * 4096**3),
    ]


def test_derive_numbers():
    d = report.derive(_rows(), CTX)
    low = d[0]
    assert low["gbps"] == pytest.approx(16e6 / 20 / 1e3)  # bytes / µs / 1e3 = GB/s
    assert low["floor_us"] == pytest.approx(16e6 / (4000 * 1e3))  # 4 µs at 4000 GB/s
    assert low["pct_floor"] == pytest.approx(100 * 4 / 20)
    assert low["speedup"] == {"cuBLAS bf16": pytest.approx(25 / 20), "fp8 rowwise": pytest.approx(2.0)}
    assert "speedup" not in d[1]
    gemm = d[3]
    assert gemm["tflops"] == pytest.approx(2 * 4096**3 / 200 / 1e6)
    # the lowbit fp8 row is held to the FP8 peak, the bf16 baseline to the bf16 one
    assert gemm["floor_us"] == pytest.approx(2 * 4096**3 / (1200 * 1e6))
    assert d[4]["floor_us"] == pytest.approx(2 * 4096**3 / (700 * 1e6))
    assert gemm["speedup"] == {"torch bf16": pytest.approx(1.5)}


def test_own_floor_and_failed_rows():
    rows = [Result("g", "c", "lowbit", us=10.0, bytes=4_000_000, extra={"floor_us": 5.0}),
            Result("g", "c", "torch", us=float("nan"), extra={"error": "not supported"}),
            Result("g", "c", "torch._scaled_mm", us=20.0, flops=2 * 1024**3)]
    d = report.derive(rows, CTX)
    assert d[0]["floor_us"] == 5.0 and d[0]["pct_floor"] == pytest.approx(50.0)
    assert d[0]["speedup"] == {"torch": None, "torch._scaled_mm": pytest.approx(2.0)}
    assert d[1]["gbps"] is None and d[1]["pct_floor"] is None
    assert d[2]["floor_us"] == pytest.approx(2 * 1024**3 / (1200 * 1e6))  # scaled_mm: the FP8 peak
    _, cells = report.table_rows(d)
    assert cells[1][3] == "-" and cells[1][7].startswith("failed: not supported")
    assert cells[0][7] == "2.00x torch._scaled_mm"


def test_sparse_attn_decode_floor():
    """The sparse-attention decode floor is the largest of one launch, the bytes and the FLOPs, and
    its ceiling is the % of copy bandwidth a kernel exactly at that floor would show."""
    from lowbit.bench.sparse_attn import decode_floor

    # b1 h64 top2048 d512: ~2.2 MB (0.55 us at 4000 GB/s) and 268 MFLOP (0.38 us): one launch decides
    nbytes, flops = 2048 * (512 * 2 + 4) + 2 * 64 * 512 * 2, 4 * 64 * 2048 * 512
    f = decode_floor(CTX, nbytes, flops, launch=1.1)
    assert f["floor_us"] == pytest.approx(1.1) and f["launch_us"] == 1.1
    assert f["ceiling % copy bw"] == pytest.approx(100 * nbytes / 1.1e3 / 4000, abs=0.05)
    assert f["ceiling % copy bw"] < 60
    # b32 h128 top2048: the FLOPs (4 h topk d a query at 700 TFLOP/s) outlast the bytes
    nbytes, flops = 32 * (2048 * (512 * 2 + 4) + 2 * 128 * 512 * 2), 4 * 32 * 128 * 2048 * 512
    f = decode_floor(CTX, nbytes, flops, launch=1.1)
    assert f["floor_us"] == pytest.approx(flops / 700e6, rel=1e-3)
    assert f["ceiling % copy bw"] == pytest.approx(100 * nbytes / (flops / 700e6) / 1e3 / 4000, abs=0.1)
    # a byte-bound case reaches 100 %
    assert decode_floor(CTX, 4_000_000_000, 1, launch=1.1)["ceiling % copy bw"] == 100.0


def test_json_is_strict_with_failed_rows(tmp_path):
    d = report.derive([Result("g", "c", "torch", us=float("nan"), extra={"error": "x"})], CTX)
    report.write_json(d, CTX, str(tmp_path / "b.json"))
    body = json.loads((tmp_path / "b.json").read_text(), parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"))
    assert body["results"][0]["us"] is None


@needs_matplotlib
def test_table_json_png(tmp_path, capsys):
    d = report.derive(_rows(), CTX)
    header, cells = report.table_rows(d)
    assert header[:4] == ["op", "case", "impl", "µs"]
    assert cells[0][3] == "20.0" and "1.25x cuBLAS bf16" in cells[0][7] and "2.00x fp8 rowwise" in cells[0][7]
    report.print_table(d)
    out = capsys.readouterr().out
    assert "lowbit int4" in out and "cuBLAS bf16" in out
    report.write_json(d, CTX, str(tmp_path / "b.json"), {"device": "fake"})
    body = json.loads((tmp_path / "b.json").read_text())
    assert body["context"]["copy_gbps"] == 4000.0 and len(body["results"]) == 5
    report.plot(d, str(tmp_path / "b.png"))
    assert (tmp_path / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_specs_records_failures():
    from lowbit.bench.registry import BenchSpec

    def good(ctx):
        return _rows()[:2]

    def bad(ctx):
        raise RuntimeError("kernel exploded")

    out = runner.run_specs([BenchSpec("good", good), BenchSpec("bad", bad)], CTX)
    assert len(out.results) == 2 and "kernel exploded" in out.failures["bad"]


def test_bench_unknown_op_is_usage_error(capsys):
    rc = main(["bench", "--op", "no_such_op"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("lowbit: error: unknown benchmark op 'no_such_op'") and "known ops:" in err


def test_bench_list_works_without_gpu(capsys):
    assert main(["bench", "--list"]) == 0
    names = sorted(runner.available_ops())
    out = capsys.readouterr().out
    assert all(n in out for n in names)


@needs_matplotlib
def test_bench_replot_a_saved_json(tmp_path, capsys):
    """``--replot``: the table and the PNG of a saved bench.json, no GPU; ``--op`` picks its ops;
    a file that is not a bench.json is a usage error naming it."""
    saved = tmp_path / "bench.json"
    report.write_json(report.derive(_rows(), CTX), CTX, str(saved), {"device": "fake GPU"})
    assert main(["bench", "--replot", str(saved), "--op", "lm_head", "--out", str(tmp_path / "re")]) == 0
    out = capsys.readouterr().out
    assert "lowbit bench on fake GPU" in out and "lowbit int4" in out and "4096^3" not in out
    assert (tmp_path / "re" / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"results": [{"op": "gemm"}]}))
    assert main(["bench", "--replot", str(saved), "--out", str(tmp_path / "all")]) == 0
    assert "4096^3" in capsys.readouterr().out and (tmp_path / "all" / "bench.png").exists()
    assert main(["bench", "--replot", str(bad), "--out", str(tmp_path / "x")]) == 2
    assert "not a bench.json" in capsys.readouterr().err
    assert main(["bench", "--replot", str(tmp_path / "missing.json")]) == 2
    assert "cannot read a bench.json" in capsys.readouterr().err
    assert main(["bench", "--replot", str(saved), "--op", "nothing_saved", "--out", str(tmp_path / "y")]) == 2
    assert "no results for nothing_saved" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown on a machine without a GPU")
def test_bench_without_gpu_says_so(capsys, tmp_path):
    rc = main(["bench", "--quick", "--out", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert rc == 1 and "no CUDA GPU" in err and "Traceback" not in err
    assert not (tmp_path / "b").exists()


@pytest.mark.cuda
def test_bench_quick_on_gpu(tmp_path):
    names = sorted(runner.available_ops())
    assert names, "no benchmark registered"
    assert main(["bench", "--quick", "--op", names[0], "--out", str(tmp_path)]) == 0
    body = json.loads((tmp_path / "bench.json").read_text())
    assert body["results"] and (tmp_path / "bench.png").exists()


@pytest.mark.cuda
def test_gemm_bench_has_layer_stack_cases():
    """The registered fp8_gemm bench (quick) times every decode case a second time as a layer
    stack, lowbit and the _scaled_mm baselines alike, under its own case name."""
    import torch

    from lowbit.bench.registry import BenchContext, discover

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: this tier runs on the H200 (pytest -m cuda)")
    rows = discover()["fp8_gemm"].fn(BenchContext(copy_gbps=4000.0, bf16_tflops=700.0, quick=True))
    stack = {(r.case, r.impl): r.us for r in rows if r.case.endswith(" stack")}
    assert {c for c, _ in stack} == {"M1 N7168 K2048 stack", "M16 N7168 K2048 stack", "M1 N2112 K7168 stack"}
    for case in {c for c, _ in stack}:
        assert stack[(case, "lowbit")] > 0 and stack[(case, "scaled_mm fp8 rowwise")] > 0


def test_graph_timing_waits_for_earlier_launches(monkeypatch):
    """``time_us(graph=True)`` synchronizes before Triton's graph timer, which runs ``fn`` on a
    stream of its own that does not wait for the current one (so ``fn`` would race the launches
    that wrote its inputs); the eager timer runs on the current stream and needs no wait."""
    import torch
    import triton.testing

    from lowbit.bench import timing

    events = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: events.append("sync"))
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph",
                        lambda fn, rep, return_mode: events.append("graph") or 0.002)
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, rep, return_mode: events.append("eager") or 0.003)
    assert timing.time_us(lambda: None, graph=True) == pytest.approx(2.0)
    assert events == ["sync", "graph"]
    events.clear()
    assert timing.time_us(lambda: None) == pytest.approx(3.0)
    assert events == ["eager"]


def test_interleaved_medians_alternates_order_and_takes_medians():
    """Rounds alternate the order (so no variant is always timed first), numeric fields are the
    median of the rounds, other fields come from the first round, a failing variant is reported
    once and not retried, and rounds < 1 is refused."""
    from lowbit.bench.timing import interleaved_medians

    calls = []
    times = {"a": iter([5.0, 1.0, 3.0]), "b": iter([2.0, 9.0, 4.0])}

    def measure(v):
        calls.append(v)
        if v == "c":
            raise RuntimeError("no kernel")
        return {"us": next(times[v]), "tag": f"{v}{len(calls)}", "ok": True}

    out = interleaved_medians(["a", "b", "c"], measure, rounds=3)
    assert calls == ["a", "b", "c", "b", "a", "a", "b"]
    assert out["a"] == {"us": 3.0, "tag": "a1", "ok": True}
    assert out["b"] == {"us": 4.0, "tag": "b2", "ok": True}
    assert out["c"] == {"error": "RuntimeError: no kernel"}
    assert list(out) == ["a", "b", "c"]
    with pytest.raises(ValueError, match="rounds"):
        interleaved_medians(["a"], measure, rounds=0)


def test_new_benchmarks_are_registered():
    names = runner.available_ops()
    assert {"read_floor", "read_floor_gathered", "read_floor_sparse_attn", "sparse_attn_stages", "draft_head_stages",
            "draft_head_real", "parallel_head"} <= names.keys()
    assert "sparse_attn" in names["read_floor_sparse_attn"].description


def test_run_specs_reports_a_skip_apart_from_failures():
    """A benchmark that raises Skip is reported with its reason, not as a failure; the run goes on."""
    from lowbit.bench.registry import BenchSpec, Skip

    def skips(ctx):
        raise Skip("no data file at x: write it with y")

    out = runner.run_specs([BenchSpec("skips", skips), BenchSpec("good", lambda ctx: _rows()[:1])], CTX)
    assert out.skipped == {"skips": "no data file at x: write it with y"}
    assert out.failures == {} and len(out.results) == 1


def test_draft_head_real_skips_without_its_data(tmp_path, monkeypatch):
    """Without the data file the benchmark raises Skip naming the file and the command that writes
    it (before touching a GPU); a file that is not such data is a Skip too; save / load round-trip."""
    from lowbit.bench import draft_head_real as dhr
    from lowbit.bench.registry import Skip

    missing = tmp_path / "none.pt.xz"
    monkeypatch.setenv(dhr.ENV, str(missing))
    assert dhr.data_path() == str(missing)
    with pytest.raises(Skip, match=rf"no real-head data at {missing}: write it with `python scripts/real_head_data.py"):
        dhr.run(CTX)
    out = runner.run_specs([runner.available_ops()["draft_head_real"]], CTX)
    assert "draft_head_real" in out.skipped and not out.failures
    junk = tmp_path / "junk.pt.xz"
    junk.write_bytes(b"not xz")
    with pytest.raises(Skip, match="is not a real-head data file"):
        dhr.load_or_skip(str(junk))
    monkeypatch.delenv(dhr.ENV)
    assert dhr.data_path() == dhr.DEFAULT_PATH
    hidden, weight = torch.randn(8, 16), torch.randn(32, 16)
    path = tmp_path / "real.pt.xz"
    dhr.save(str(path), hidden, weight, "tiny")
    blob = dhr.load_or_skip(str(path))
    assert blob["model"] == "tiny" and blob["hidden"].dtype == torch.bfloat16
    assert torch.equal(blob["weight"], weight.to(torch.bfloat16))


@pytest.mark.interpret
def test_stream_read_kernel_reads_every_word():
    """The streaming bare read XOR-reduces each program's words (a partial last block included)."""
    import numpy as np

    from lowbit.bench.read_floor import stream_read

    buf = torch.randint(-2**31, 2**31 - 1, (2048 * 2 + 300,), dtype=torch.int32)
    out = torch.zeros(3, dtype=torch.int32)
    stream_read(buf, out, block=2048, warps=4)()
    words = np.concatenate([buf.numpy(), np.zeros(3 * 2048 - buf.numel(), dtype=np.int32)]).reshape(3, 2048)
    assert out.tolist() == np.bitwise_xor.reduce(words, axis=1).tolist()


@pytest.mark.interpret
@pytest.mark.parametrize("tt,s", [(4, 1), (2, 2), (8, 4)])
def test_gathered_read_kernel_reads_the_rows(tt, s):
    """The gathered bare read stores, at each index, the XOR of that row's packed and scale words and
    x's words (low byte) plus the value: it reads what it claims, for split rows too."""
    import numpy as np

    from lowbit.bench.read_floor import gathered_geometries, gathered_read
    from lowbit.formats import NVFP4

    k, v, b, t = 256, 64, 2, 8
    assert (tt, s, 4) in gathered_geometries(k, t) or (tt, s, 8) in gathered_geometries(k, t)
    w = NVFP4.quantize(torch.randn(v, k))
    x = torch.randn(b, k, dtype=torch.bfloat16)
    values = torch.zeros(b, t)
    idx = torch.stack([torch.randperm(v)[:t] for _ in range(b)])
    logits = torch.zeros(b, v, dtype=torch.bfloat16)
    gathered_read(w, [(x, values, idx)], logits, tt, s, 4)()
    pk, sc, xw = (a.contiguous().view(torch.int32).numpy() for a in (w.packed, w.scale, x))
    for bi in range(b):
        for ti in range(t):
            r = int(idx[bi, ti])
            if s == 1:
                want = np.bitwise_xor.reduce(pk[r]) ^ np.bitwise_xor.reduce(sc[r]) ^ np.bitwise_xor.reduce(xw[bi])
            else:  # each part stores its own share; the last part's lands
                part = s - 1
                kw, sw, xn = pk.shape[1] // s, sc.shape[1], xw.shape[1] // s
                want = (np.bitwise_xor.reduce(pk[r, part * kw:(part + 1) * kw])
                        ^ (np.bitwise_xor.reduce(sc[r, part * (sw // s):(part + 1) * (sw // s)]) if sw >= s else 0)
                        ^ np.bitwise_xor.reduce(xw[bi, part * xn:(part + 1) * xn]))
            assert float(logits[bi, r]) == float(torch.tensor(float(want & 0xFF)).to(torch.bfloat16)), (bi, ti)


@pytest.mark.interpret
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8kv"])
@pytest.mark.parametrize("p,tt", [(1, 16), (2, 32)])  # two loop steps; one part-masked step
def test_attn_read_kernel_reads_the_rows(p, tt, fp8):
    """The sparse-attention bare read stores into every o word q's word XOR the XOR of its part's
    index words and of the kv rows (and FP8 group-scale words) those indices name, -1 slots skipped:
    it reads what it claims, a query's batch row of the cache included."""
    import numpy as np

    from lowbit.bench.read_floor import attn_geometries, attn_read
    from lowbit.formats.fp8 import FP8

    b, m, h, d, n, topk = 2, 2, 32, 128, 16, 32
    assert any(g[:2] == (p, tt) for g in attn_geometries(topk, h))
    torch.manual_seed(0)
    full = torch.randn(b + 1, n, d).to(torch.bfloat16)  # a row before the cache: a read at -1 lands in it
    if fp8:
        fmt = FP8.quantize(full, "group", 64)
        kv, kv_scale = fmt.data[1:], fmt.scale[1:]
    else:
        kv, kv_scale = full[1:], None
    q = torch.randn(b, m, h, d, dtype=torch.bfloat16)
    idx = torch.randint(0, n, (b, m, topk), dtype=torch.int32)
    idx[0, 0, 3] = idx[1, 1, 10] = idx[1, 0, -1] = -1
    idx[..., -2:] = -1
    o = torch.full((b, m, h, d), 7.0, dtype=torch.bfloat16)
    attn_read([(q, kv, torch.zeros(h), idx, kv_scale)], o, p, tt, 4)()
    kvw, qw, ow = kv.view(torch.int32).numpy(), q.view(torch.int32).numpy(), o.view(torch.int32).numpy()
    scw = kv_scale.view(torch.int32).numpy() if fp8 else None
    kp, hp = topk // p, h // p
    for bi in range(b):
        for mi in range(m):
            for part in range(p):
                acc = np.int32(0)
                for r in idx[bi, mi, part * kp:(part + 1) * kp].tolist():
                    acc ^= np.int32(r)
                    if r >= 0:
                        acc ^= np.bitwise_xor.reduce(kvw[bi, r])
                        if fp8:
                            acc ^= np.bitwise_xor.reduce(scw[bi, r])
                heads = slice(part * hp, (part + 1) * hp)
                assert np.array_equal(ow[bi, mi, heads], qw[bi, mi, heads] ^ acc), (bi, mi, part)


@pytest.mark.interpret
def test_draft_head_stages_rows(tmp_path, monkeypatch):
    """The draft head's stage probe on a tiny random head, then a tiny "real" head from a data
    file (CPU, timer faked): per head and M the whole call, the coarse pass at 4 and 8 candidates
    a block and the tail alone at three sizes; each tail row answers the exact top-16 of the call
    (its replays are what is timed) and carries its rates. Without the data file only the random
    head's rows."""
    from lowbit.bench import draft_head_real as dhr, draft_head_stages as dhs, timing

    monkeypatch.setattr(dhs, "SHAPE", (512, 64))
    monkeypatch.setattr(dhs, "MS", (2,))
    gen = torch.Generator().manual_seed(0)
    path = tmp_path / "tiny.pt.xz"
    dhr.save(str(path), torch.randn(9, 64, generator=gen), torch.randn(1024, 64, generator=gen) * 0.05, "tiny")
    monkeypatch.setenv(dhr.ENV, str(path))
    answers = []

    def fake_time_us(fn, graph=False):
        assert graph
        answers.append(fn())
        return float(len(answers))

    monkeypatch.setattr(timing, "time_us", fake_time_us)
    ctx = BenchContext(copy_gbps=4000.0, bf16_tflops=700.0, quick=True, device="cpu")
    with lowbit.backend("triton"):
        rows = runner.available_ops()["draft_head_stages"].fn(ctx)
    impls = ["certified top16", "coarse pass kcand 4", "coarse pass kcand 8", "tail kcand 8 cap 256",
             "tail kcand 4 cap 128", "tail kcand 8 cap 1024"]
    assert [(r.case, r.impl) for r in rows] == [(c, i) for c in ("512x64 M2", "real 1024x64 M2") for i in impls]
    assert [r.us for r in rows] == [float(i + 1) for i in range(12)]
    for j in range(2):
        whole, tails = answers[6 * j], answers[6 * j + 3: 6 * j + 6]
        assert whole[1].shape == (2, 16)
        for v, i in tails:  # the same exact top-16 as the whole call (the call's x)
            assert torch.equal(i, whole[1]) and torch.equal(v, whole[0])
        for r in rows[6 * j + 3: 6 * j + 6]:
            assert set(r.extra) == {"wide_rate", "fallback_rate", "rescan_rate"}
            assert all(0.0 <= v <= 1.0 for v in r.extra.values())
    blob = dhr.load(str(path))
    x = blob["hidden"][torch.tensor([0, 8])].float()
    ref = (x @ blob["weight"].float().t()).topk(16, dim=-1).indices
    assert torch.equal(answers[6][1], ref)  # the real rows: positions spread over the file, exact
    monkeypatch.setenv(dhr.ENV, str(tmp_path / "absent.pt.xz"))
    monkeypatch.setattr(dhs, "_stage_rows", lambda head, w, x, case: [case])
    assert dhs.run(ctx) == ["512x64 M2"]


@pytest.mark.interpret
def test_sparse_attn_stages_rows(monkeypatch):
    """The stage probe on tiny decode cases (CPU, timer faked): a case the dispatch splits gets four
    rows, each timing the launches it names (counted through proxies of the two kernels); the
    merge replayed alone writes the op's answer for the recorded inputs; a case it does not split
    (as many programs as SMs) and prefill are left out."""
    from lowbit.bench import sparse_attn as sa, timing
    from lowbit.ops.sparse_attn import triton as kernels
    from lowbit.ops.sparse_attn.reference import sparse_attn_reference

    monkeypatch.setattr(sa, "D", 128)
    monkeypatch.setattr(sa, "N_CACHE", 512)
    # 4 SMs under the interpreter: b1 (1 program) splits its 4 tiles, b4 (4 programs) does not
    monkeypatch.setattr(sa, "_attn_cases", lambda quick: [(1, 1, 4, 256, False), (1, 4, 4, 256, False),
                                                          (64, 1, 4, 32, False)])
    counts, last = {"split": 0, "merge": 0}, {}

    class Counted:
        def __init__(self, name, kernel):
            self.name, self.kernel = name, kernel

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                counts[self.name] += 1
                last[self.name] = args
                return self.kernel[grid](*args, **kwargs)
            return launch

    monkeypatch.setattr(kernels, "_sparse_attn_kernel", Counted("split", kernels._sparse_attn_kernel))
    monkeypatch.setattr(kernels, "_sparse_attn_combine_kernel", Counted("merge", kernels._sparse_attn_combine_kernel))
    made, seen = [], []

    def fake_time_us(fn, graph=False):
        assert graph
        counts.update(split=0, merge=0)
        fn()
        made.append((counts["split"], counts["merge"]))
        seen.append(dict(last))
        return float(len(made))

    monkeypatch.setattr(timing, "time_us", fake_time_us)
    ctx = BenchContext(copy_gbps=4000.0, bf16_tflops=700.0, quick=True, device="cpu")
    with lowbit.backend("triton"):  # the Triton kernels under the interpreter
        rows = runner.available_ops()["sparse_attn_stages"].fn(ctx)
    impls = ["lowbit", "split kernel alone", "merge alone", "one launch (no split)"]
    assert [(r.case, r.impl) for r in rows] == [("decode m1 b1 h4 top256", i) for i in impls]
    assert made == [(1, 1), (1, 0), (0, 1), (1, 0)]
    assert [r.us for r in rows] == [1.0, 2.0, 3.0, 4.0]
    assert rows[0].extra == {"splits": 4, "split programs": 4, "merge programs": 1}
    # the merge replayed alone: over the partials of the recorded call's inputs, launched just before
    q, kv, _, sink, idx = seen[2]["split"][:5]
    o = seen[2]["merge"][4]
    ref = sparse_attn_reference(q, kv, sink, idx, 128**-0.5, None)
    torch.testing.assert_close(o.float(), ref.float(), rtol=2e-2, atol=2e-2)

@pytest.mark.interpret
def test_read_floor_sparse_attn_rows(monkeypatch):
    """The registered benchmark on tiny decode cases (CPU, timer faked): for each decode case (the
    prefill case left out) a bare-read row timing every geometry and a lowbit row whose floor is
    max(one launch, the bare read, FLOPs at the bf16 peak), bytes and FLOPs as sparse_attn counts them."""
    from lowbit.bench import read_floor, sparse_attn as sa, timing

    monkeypatch.setattr(sa, "D", 128)
    monkeypatch.setattr(sa, "N_CACHE", 64)
    monkeypatch.setattr(sa, "_attn_cases", lambda quick: [(1, 2, 4, 32, False), (2, 1, 4, 32, True),
                                                          (64, 1, 4, 32, False)])
    calls = []

    def fake_time_us(fn, graph=False):
        assert graph
        fn()
        calls.append(fn)
        return 30.0 - 2 * len(calls)  # the first case's best read is 18 µs, the second's 4 µs

    monkeypatch.setattr(timing, "time_us", fake_time_us)
    monkeypatch.setattr(timing, "launch_us", lambda device="cuda": 2.5)
    ctx = BenchContext(copy_gbps=4000.0, bf16_tflops=1e-2, quick=True, device="cpu")  # 13.1 µs of FLOPs a case
    rows = runner.available_ops()["read_floor_sparse_attn"].fn(ctx)
    cases = ["decode m1 b2 h4 top32", "decode m2 b1 h4 top32 fp8kv"]
    assert [(r.case, r.impl) for r in rows] == [(c, impl) for c in cases for impl in ("bare read", "lowbit")]
    decode = [(1, 2, 4, 32, False), (2, 1, 4, 32, True)]
    for (m, b, h, topk, fp8), read, ours in zip(decode, rows[::2], rows[1::2]):
        geoms = read_floor.attn_geometries(topk, h)
        assert len(read.extra["reads"]) == len(geoms) and read.us == min(read.extra["reads"].values())
        row_bytes = 128 * (1 if fp8 else 2) + (128 // 64 * 4 if fp8 else 0)
        nbytes, flops = b * m * topk * (row_bytes + 4) + 2 * b * m * h * 128 * 2, 4 * b * m * h * topk * 128
        assert (read.bytes, ours.bytes, ours.flops) == (nbytes, nbytes, flops)
        e = ours.extra
        assert e["read_us"] == read.us and e["launch_us"] == 2.5 and e["timing"] == "graph"
        assert e["flops_us"] == pytest.approx(flops / 1e4) == pytest.approx(13.1072)
        assert e["floor_us"] == (read.us if read.us > e["flops_us"] else e["flops_us"])
    assert rows[0].us == 18.0 and rows[2].us == 4.0  # one case bound by its read, the other by its FLOPs


def test_attn_read_refuses_bad_geometry():
    from lowbit.bench.read_floor import attn_read

    q, idx = torch.zeros(1, 1, 8, 128, dtype=torch.bfloat16), torch.zeros(1, 1, 12, dtype=torch.int32)
    kv, o = torch.zeros(1, 4, 128, dtype=torch.bfloat16), torch.zeros(1, 1, 8, 128, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="p=8 must divide topk=12"):
        attn_read([(q, kv, None, idx, None)], o, 8, 4, 4)
    with pytest.raises(ValueError, match="topk_idxs must be int32"):
        attn_read([(q, kv, None, idx.long(), None)], o, 4, 4, 4)


def test_parallel_head_on_cpu_world_of_one(tmp_path, capsys):
    """``python -m lowbit.bench.parallel_head`` as a gloo world of one on CPU (small head): the JSON
    it writes, and its rows as benchmark results (one lowbit and one baseline row per (M, k))."""
    from lowbit.bench import parallel_head as ph

    out = tmp_path / "tp1.json"
    assert ph.main(["--device", "cpu", "--vocab", "512", "--k-dim", "128", "--iters", "2", "--warmup", "1",
                    "--ms", "1,4", "--topk", "1,4", "--out", str(out)]) == 0
    body = json.loads(out.read_text())
    assert body["config"]["world"] == 1 and len(body["results"]) == 2 * 2 * 5
    assert all(r["top1_agreement_vs_bf16_baseline"] == 1.0 for r in body["results"])
    rows = ph.to_results(body["results"], "V512 K128", 1)
    assert [r.impl for r in rows[:2]] == ["lowbit ParallelDraftHead.topk", "linear + all-gather + topk"]
    assert len(rows) == 8 and rows[0].case == "V512 K128 M1 k1 world 1" and "comm lowbit keys us" in rows[0].extra
    d = report.derive(rows, CTX)
    assert d[0]["speedup"]["linear + all-gather + topk"] > 0 and d[0]["floor_us"] is None


def test_run_specs_checkpoints_after_every_benchmark():
    import time

    from lowbit.bench.registry import BenchSpec

    def slow(ctx):
        time.sleep(0.3)
        return _rows()[3:]

    seen = []
    specs = [BenchSpec("a", lambda ctx: _rows()[:2]), BenchSpec("b", slow)]
    out = runner.run_specs(specs, CTX, checkpoint=lambda out, pending: seen.append((len(out.results), pending,
                                                                                    dict(out.seconds))))
    assert [(n, p) for n, p, _ in seen] == [(2, ["b"]), (4, [])]
    # each benchmark's wall time, for planning a run under a time limit, checkpointed with it
    assert list(seen[0][2]) == ["a"] and list(out.seconds) == ["a", "b"]
    assert 0 <= out.seconds["a"] < 0.25 <= out.seconds["b"] < 5


def test_bench_keeps_what_finished_when_stopped(tmp_path, monkeypatch):
    """A run stopped part way (Ctrl-C, a time limit) leaves a bench.json with the finished
    benchmarks' rows, the names still to run, and the versions and command of the record."""
    from lowbit.bench.registry import BenchSpec

    def stop(ctx):
        raise KeyboardInterrupt

    specs = [BenchSpec("a", lambda ctx: _rows()[:2]), BenchSpec("stop", stop), BenchSpec("c", lambda ctx: _rows())]
    monkeypatch.setattr(runner, "select_ops", lambda names: specs)
    monkeypatch.setattr(runner, "require_gpu", lambda: "Fake GPU")
    monkeypatch.setattr(runner, "measure_context", lambda quick, log=print: CTX)
    assert main(["bench", "--op", "a", "--op", "stop", "--op", "c", "--out", str(tmp_path)]) == 130
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json"]
    body = json.loads((tmp_path / "bench.json").read_text())
    assert [r["impl"] for r in body["results"]] == ["lowbit int4", "cuBLAS bf16"]
    meta = body["meta"]
    assert meta["pending"] == ["stop", "c"] and meta["device"] == "Fake GPU"
    assert list(meta["seconds"]) == ["a"]
    assert meta["command"] == "lowbit bench --op a --op stop --op c"
    assert meta["torch"] == torch.__version__ and {"lowbit", "triton", "cuda"} <= meta.keys()


@pytest.mark.interpret
def test_draft_head_real_rows_on_a_tiny_head(tmp_path, monkeypatch):
    """The benchmark's whole body on a tiny head (CPU, the timers faked, kernels interpreted): per
    M a bare-read row, cuBLAS and every configuration, the certified rows with their floor, coarse
    pass and exactness against fp64 over every position."""
    from lowbit.bench import draft_head_real as dhr
    from lowbit.bench import timing

    gen = torch.Generator().manual_seed(0)
    path = tmp_path / "tiny.pt.xz"
    dhr.save(str(path), torch.randn(9, 64, generator=gen), torch.randn(1024, 64, generator=gen) * 0.05, "tiny")
    monkeypatch.setenv(dhr.ENV, str(path))
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)
    calls = []

    def fake_timer(fn, xs, reps=3):
        calls.append(len(xs))
        fn(xs[0])
        return 1.0

    monkeypatch.setattr(timing, "cold_graph_us", fake_timer)
    monkeypatch.setattr(dhr, "_eager_us", lambda fn, xs: 2.0)
    monkeypatch.setattr(dhr, "MS", (1, 4))
    monkeypatch.setattr(dhr, "BATCHES", 2)
    monkeypatch.setattr(dhr, "CONFIGS", {"certified int8 g64": dict(mode="certified", bits=8, group_size=64)})
    rows = dhr.run(BenchContext(copy_gbps=1.0, bf16_tflops=1.0, fp8_tflops=None, quick=False, device="cpu"))
    assert [(r.case, r.impl) for r in rows] == [(f"1024x64 M{m}", impl) for m in (1, 4) for impl in
                                               ("bare read", "cuBLAS bf16 + argmax", "lowbit certified int8 g64 argmax")]
    for r in rows:
        if r.impl.startswith("lowbit"):
            assert r.extra["floor_us"] == 1.0 and r.extra["coarse_pass_us"] == 1.0
            assert r.extra["agreement_vs_fp64_all_positions"] == 1.0
            assert r.extra["top16_set_agreement_vs_fp64_all_positions"] == 1.0
            assert 0.0 <= r.extra["top16_rescan_rate"] <= 1.0 and r.extra["top16_fallback_rate"] == 0.0
            assert r.extra["eager_graphs_us"] == 2.0 and r.extra["eager_graphs_same"] is True
    assert rows[0].extra["bf16_read_us"] == 1.0
