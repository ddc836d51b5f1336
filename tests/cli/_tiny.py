"""Tiny offline fixtures for the CLI tests: a random LlamaForCausalLM with a byte-level tokenizer,
and small random safetensors checkpoints."""
from __future__ import annotations

import importlib.util
import os

import pytest
import torch

#: the PNG writers (eval-head, bench) need matplotlib, an optional dependency: skip, not error
needs_matplotlib = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                      reason="matplotlib is not installed (the PNG output needs it)")

VOCAB = 320  # 256 byte tokens + specials, padded; several DraftHead blocks of 128
HIDDEN = 64


def make_tiny_llama(folder: str, seed: int = 0) -> str:
    """Save a 2-layer random Llama (hidden 64, vocab 320) and a byte-level BPE tokenizer with
    a chat template to ``folder``; return it. Built offline from nothing."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    for s in specials:
        vocab[s] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", bos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=True, eos_token_id=vocab["<|im_end|>"], bos_token_id=vocab["<|endoftext|>"],
                      pad_token_id=vocab["<|endoftext|>"])
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # larger logits than the default init, so greedy picks are not near-ties
        model.model.embed_tokens.weight.normal_(0, 0.5)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def make_checkpoint(path: str, tensors: dict[str, tuple[int, ...]], dtype=torch.bfloat16, seed: int = 0) -> dict[str, torch.Tensor]:
    """Write random tensors of the given shapes to the safetensors file ``path``; return them."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    out = {name: (torch.randn(shape, generator=g) * 0.05).to(dtype) for name, shape in tensors.items()}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    save_file(out, path)
    return out
