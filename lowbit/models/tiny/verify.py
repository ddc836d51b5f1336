"""``lowbit selftest``: build the tiny model, generate with a KV cache, and check it end to end.

Checks (each a relative error ``||a - b|| / ||b||`` over fp32 logits, and a NaN/Inf scan):

1. ``decode_vs_prefill``: the logits of ``steps`` one-token decode calls (after a prefill of the
   prompt) equal the logits of one from-scratch prefill of the same tokens.
2. ``prompt_vs_prefill``: the prompt's own logits equal the prefill's (differs only in M).
3. ``triton_vs_reference`` (when ``compare_reference`` and the run is not already the reference
   path, e.g. on CUDA): the same model run under ``lowbit.backend("reference")`` on the same
   device gives the same full-prefill logits.
4. ``finite``: every module output of every call is free of NaN / Inf (forward hooks).

Tolerance (derived per run, reported as ``tol``). The runs compared do the same arithmetic up
to rounding: a GEMM's blocking depends on M, and a Triton kernel sums in another order than the
reference. The kernels' own contract (their tests) is a relative error of at most
``KERNEL_REL = 2^-8`` per output. How much such errors grow through this model (nonlinear
layers amplify them: SwiGLU, softmax, FP8 re-quantization of the next input) is *measured*: the
reference path is rerun with every linear's output perturbed by seeded, independent uniform
noise of rms ``KERNEL_REL``, and the logits' relative error of that run is the noise floor.
``tol = 2 * floor`` (at least 2^-8): the two runs compared each carry up to one kernel-contract
error.
The floor is large, ~0.07-0.11 with the defaults (12 seeds), because FP8 re-quantization of each
linear's input amplifies small errors: an element nudged across an e4m3 rounding boundary moves
by a whole e4m3 step (2^-3 relative), so a perturbation eps becomes ~sqrt(2 * eps * 2^-4) rms.
Measured on CPU: decode vs prefill 0-1.6e-2 (12 seeds); Triton interpreter vs reference 2.9e-2
on the tests' one-block model (floor 3.2e-2 there; the interpreter truncates fp32 -> bf16). Per-kernel rounding bugs are the kernels'
tests' business; this end-to-end check catches wiring, caching, masking and NaN errors, which
move the logits by O(1).
Discrete choices (indexer top-k sets, MoE top-k experts) could flip at an exact near-tie and move
one token's logits further; the report counts such flips (``decision_flips``) so a failure caused
by one is recognisable rather than silent.
"""
from __future__ import annotations

import contextlib
import time

import torch

import lowbit
from lowbit._backend import use_triton
from lowbit.models.tiny.config import TinyConfig

KERNEL_REL = 2.0**-8  # per-output relative error a kernel may have (the GEMM tests' bound)
TOL_FACTOR = 2.0


@contextlib.contextmanager
def kernel_noise(model: torch.nn.Module, rel: float = KERNEL_REL, seed: int = 0):
    """Perturb every ``lowbit.nn.Linear`` output by independent uniform relative noise of rms
    ``rel`` (``y * (1 + u)``, ``u ~ U(-sqrt(3) rel, sqrt(3) rel)``, seeded): a model run whose
    kernels are each off by exactly their contract."""
    from lowbit.nn.linear import Linear

    gens: dict[torch.device, torch.Generator] = {}

    def hook(_mod, _inp, out):
        if out.device not in gens:
            gens[out.device] = torch.Generator(device=out.device).manual_seed(seed)
        g = gens[out.device]
        u = torch.rand(out.shape, generator=g, device=out.device) * 2 - 1
        return (out.float() * (1 + u * rel * 3**0.5)).to(out.dtype)

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, Linear)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a64, b64 = a.double().cpu(), b.double().cpu()
    return ((a64 - b64).norm() / b64.norm().clamp_min(1e-30)).item()


class _Watch:
    """Forward hooks on every module: record non-finite outputs and the discrete decisions
    (indexer positions, routed experts) of the current call."""

    def __init__(self, model: torch.nn.Module):
        from lowbit.models.tiny.attention import Indexer
        from lowbit.models.tiny.moe import Gate

        self.bad: list[str] = []
        self.decisions: dict[str, list[torch.Tensor]] = {}
        self.handles = []
        for name, mod in model.named_modules():
            self.handles.append(mod.register_forward_hook(self._finite_hook(name or "model")))
            if isinstance(mod, (Indexer, Gate)):
                self.handles.append(mod.register_forward_hook(self._decision_hook(name)))

    def _finite_hook(self, name):
        def hook(_mod, _inp, out):
            outs = out if isinstance(out, (tuple, list)) else (out,)
            for t in outs:
                if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all()):
                    self.bad.append(name)
        return hook

    def _decision_hook(self, name):
        def hook(_mod, _inp, out):
            idx = out[1] if isinstance(out, tuple) else out  # Gate -> (weights, indices)
            self.decisions.setdefault(name, []).append(idx.detach().sort(dim=-1).values.cpu())
        return hook

    def take(self) -> dict[str, list[torch.Tensor]]:
        d, self.decisions = self.decisions, {}
        return d

    def remove(self):
        for h in self.handles:
            h.remove()


def _decisions_per_token(calls: list[torch.Tensor], batch: int) -> torch.Tensor:
    """Concatenate one module's per-call decisions along the sequence: [b, s, k]."""
    return torch.cat([c.reshape(batch, -1, c.shape[-1]) for c in calls], dim=1)


def _count_flips(a: dict, b: dict, batch: int) -> int:
    """Tokens (summed over layers) whose chosen set differs between two runs over the same tokens."""
    flips = 0
    for name in a:
        x, y = _decisions_per_token(a[name], batch), _decisions_per_token(b[name], batch)
        flips += int((x != y).any(-1).sum())
    return flips


def generate(model, prompt: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Prefill ``prompt [b, P]`` then ``steps`` greedy one-token decode calls.

    Returns (tokens [b, P + steps], logits [b, P + steps, vocab]): the logits of position t
    predict token t+1; decoded tokens are the argmax of the previous position's logits.
    """
    b, p = prompt.shape
    logits = [model(prompt, 0)]
    tokens = [prompt]
    for i in range(steps):
        nxt = logits[-1][:, -1].argmax(-1, keepdim=True)
        tokens.append(nxt)
        logits.append(model(nxt, p + i))
    return torch.cat(tokens, 1), torch.cat(logits, 1)


def selftest(device: str = "cpu", steps: int = 22, verbose: bool = True, *, config: TinyConfig | None = None,
             seed: int = 0, batch: int = 2, prompt_len: int = 42, backend: str | None = None,
             compare_reference: bool | None = None) -> dict:
    """Run the checks above; returns ``{"ok": bool, "checks": {...}, ...}`` (see module doc).

    device: where the model runs ("cpu", "cuda"). backend: force ``lowbit.backend(backend)`` for
    the main run (``"triton"`` on CPU = the Triton interpreter, needs ``TRITON_INTERPRET=1``);
    default: the automatic choice (Triton for CUDA tensors, reference on CPU).
    compare_reference: also run the reference path and compare (default: when the main run is not
    already the reference). prompt_len + steps must fit ``config.max_seq_len``; the defaults make
    64 positions, beyond window + index_topk = 32, so the indexer's choice matters.
    """
    from lowbit.models.tiny.model import TinyModel

    cfg = config or TinyConfig()
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("selftest(device='cuda') but no CUDA device is visible")
    if not (1 <= batch <= cfg.max_batch_size and prompt_len >= 1 and steps >= 1 and prompt_len + steps <= cfg.max_seq_len):
        raise ValueError(f"batch={batch}, prompt_len={prompt_len}, steps={steps} do not fit max_batch_size="
                         f"{cfg.max_batch_size}, max_seq_len={cfg.max_seq_len}")

    def main_ctx():
        return lowbit.backend(backend) if backend else contextlib.nullcontext()

    with main_ctx():  # which path the main run takes (raises if "triton" is forced where it can't run)
        main_is_triton = use_triton(torch.empty(0, device=device))
    if compare_reference is None:
        compare_reference = main_is_triton

    t0 = time.perf_counter()
    model = TinyModel(cfg, seed=seed).to(device)
    gen = torch.Generator().manual_seed(seed + 1)
    prompt = torch.randint(0, cfg.vocab_size, (batch, prompt_len), generator=gen).to(device)
    watch = _Watch(model)
    checks: dict[str, dict] = {}

    def check(name, value, tol):
        checks[name] = {"value": value, "tol": tol, "ok": bool(value <= tol)}

    try:
        with main_ctx():
            tokens, gen_logits = generate(model, prompt, steps)
            gen_dec = watch.take()
            full = model(tokens, 0)
            full_dec = watch.take()
        with lowbit.backend("reference"):
            ref = model(tokens, 0)
            ref_dec = watch.take()
            with kernel_noise(model, seed=seed):
                noisy = model(tokens, 0)
            watch.take()
        floor = _rel_err(noisy, ref)
        tol = max(TOL_FACTOR * floor, KERNEL_REL)  # never below one kernel's own allowance
        check("decode_vs_prefill", _rel_err(gen_logits[:, prompt_len:], full[:, prompt_len:]), tol)
        check("prompt_vs_prefill", _rel_err(gen_logits[:, :prompt_len], full[:, :prompt_len]), tol)
        flips = _count_flips(gen_dec, full_dec, batch)
        if compare_reference:
            check("triton_vs_reference", _rel_err(full, ref), tol)
            flips_ref = _count_flips(full_dec, ref_dec, batch)
        checks["finite"] = {"value": len(watch.bad), "tol": 0, "ok": not watch.bad}
    finally:
        watch.remove()

    result = {
        "ok": all(c["ok"] for c in checks.values()),
        "device": str(device),
        "backend": backend or lowbit.get_backend(),
        "path": "triton" if main_is_triton else "reference",
        "checks": checks,
        "noise_floor": floor,
        "decision_flips": {"decode_vs_prefill": flips, **({"triton_vs_reference": flips_ref} if compare_reference else {})},
        "nonfinite_modules": sorted(set(watch.bad)),
        "positions": prompt_len + steps,
        "seconds": time.perf_counter() - t0,
    }
    if verbose:
        print(format_report(result))
    return result


def format_report(result: dict) -> str:
    lines = [f"lowbit tiny-model self-test on {result['device']} ({result['path']} path, "
             f"{result['positions']} positions, {result['seconds']:.1f} s)"]
    for name, c in result["checks"].items():
        lines.append(f"  {'PASS' if c['ok'] else 'FAIL'}  {name:22s} {c['value']:.3g}  (tol {c['tol']:.3g})")
    lines.append(f"        (tol = {TOL_FACTOR:g} x {result['noise_floor']:.3g}, the logit error when every linear is off by 2^-8)")
    for name, n in result["decision_flips"].items():
        if n:
            lines.append(f"  note  {name}: {n} token(s) chose different indexer positions / experts (near ties)")
    if result["nonfinite_modules"]:
        lines.append(f"  non-finite outputs in: {', '.join(result['nonfinite_modules'][:8])}")
    lines.append("OK" if result["ok"] else "FAILED")
    return "\n".join(lines)
