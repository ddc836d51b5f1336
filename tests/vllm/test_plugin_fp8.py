"""The drafter head over an FP8 LM head exactly as vLLM holds it after loading.

A compressed-tensors FP8 ``ParallelLMHead`` (W8A8, per-channel weight scales) is built by vLLM's
own quantization config and ``process_weights_after_loading`` on CPU (vLLM stores the weight as the
transposed ``[K, V_pad]`` view there); the plugin must read its rows natively and return the exact
argmax. (vLLM CPU cannot process per-tensor FP8 weights: it lacks ``static_scaled_fp8_quant``;
that layout is covered in tests/integrations.) Needs a one-rank model-parallel group (gloo).
"""
from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("vllm")

from vllm.compilation.backends import set_model_tag  # noqa: E402
from vllm.config import ModelConfig, VllmConfig, set_current_vllm_config  # noqa: E402
from vllm.model_executor.layers.logits_processor import LogitsProcessor  # noqa: E402
from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (  # noqa: E402
    CompressedTensorsConfig,
)
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead  # noqa: E402

from lowbit.formats import FP8  # noqa: E402
from lowbit.integrations.vllm import config, stats  # noqa: E402
from lowbit.integrations.vllm.logits import LowbitLogitsProcessor  # noqa: E402
from lowbit.integrations.vllm.weights import lm_head_weight  # noqa: E402

V, K = 1000, 64
TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": K, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 1, "vocab_size": V,
        "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "torch_dtype": "float32"}


@pytest.fixture(scope="module")
def vllm_config(tmp_path_factory):
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.distributed.parallel_state import model_parallel_is_initialized

    folder = tmp_path_factory.mktemp("tiny_llama")
    (folder / "config.json").write_text(json.dumps(TINY))
    vc = VllmConfig(model_config=ModelConfig(model=str(folder), dtype="float32", skip_tokenizer_init=True))
    if not model_parallel_is_initialized():
        with set_current_vllm_config(vc):
            init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                         distributed_init_method=f"file://{folder / 'rendezvous'}")
            initialize_model_parallel(1, 1)
    return vc


def _fp8_head(vc, seed=0):
    qc = CompressedTensorsConfig.from_config({
        "quant_method": "compressed-tensors", "format": "float-quantized", "ignore": [],
        "config_groups": {"g": {"targets": ["Linear", "lm_head"],
                                "weights": {"num_bits": 8, "type": "float", "strategy": "channel",
                                            "symmetric": True, "dynamic": False},
                                "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                                      "symmetric": True, "dynamic": True}}}})
    with set_current_vllm_config(vc):
        head = ParallelLMHead(V, K, quant_config=qc, prefix="lm_head", disable_tp=True)
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(head.weight.shape, generator=g) * 0.05
    with torch.no_grad():
        s = w.abs().amax(1, keepdim=True) / 448
        head.weight.copy_((w / s).to(torch.float8_e4m3fn))
        head.weight_scale.copy_(s)
    head.quant_method.process_weights_after_loading(head)
    return head


def test_fp8_head_read_natively(vllm_config, monkeypatch):
    monkeypatch.setenv("LOWBIT_VLLM", "draft")
    monkeypatch.delenv("LOWBIT_VLLM_STATS", raising=False)
    config.reset()
    stats.reset()
    try:
        head = _fp8_head(vllm_config)
        assert head.weight.shape == (K, 1024)  # what vLLM CPU keeps: the transposed view
        weight, reason = lm_head_weight(head)
        assert reason is None and isinstance(weight, FP8) and weight.data.shape == (V, K)
        with set_current_vllm_config(vllm_config), set_model_tag("draft_model"):
            drafter = LowbitLogitsProcessor(V)
        x = torch.randn(6, K, generator=torch.Generator().manual_seed(1))
        ids = drafter.get_top_tokens(head, x)
        rows64 = weight.data.double() * weight.scale.double()
        assert torch.equal(ids, (x.double() @ rows64.t()).argmax(-1))
        assert drafter.lowbit_head.head.bits is None  # the FP8 rows are the coarse pass
        assert stats.snapshot()["counts"]["draft_calls"] == 1
        # vLLM's own head (fp8 activations) agrees wherever its logits are not close to a tie
        with set_current_vllm_config(vllm_config):
            logits = LogitsProcessor(V)(head, x)
        top2 = logits.topk(2, -1).values
        clear = (top2[:, 0] - top2[:, 1]) > 0.05 * top2[:, 0].abs()
        assert torch.equal(ids[clear], logits.argmax(-1)[clear])
    finally:
        config.reset()
        stats.reset()
