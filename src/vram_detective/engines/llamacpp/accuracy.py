"""llama.cpp / Ollama figures for a ground-truth case (shared/groundtruth/SCHEMA.md's llama.cpp `observed` keys),
shared by scoring.py and benchmarks/llamacpp_accuracy.py: the plan of each case, and the rows comparing each
buffer the log prints with the plan's.

Per case: model buffer per device, KV buffer per device (exact), compute buffer per device, VRAM per device
(llama.cpp's own buffers on that GPU: model + KV + compute, the figures a log prints) and host RAM (host model
buffer + CPU KV + CUDA_Host compute + output buffer), where the log prints every part. The cases name GGUF files
the model catalog does not hold, so each planned case carries its model's shape (the public config.json values)
and the settings its log shows, in the engine's names: inputs read from the case, not fitted values. Cases whose
model has no stock llama.cpp mix (Unsloth UD, ik_llama forks, unnamed files) or whose layout quant_mix does not
write are listed as not planned, with the reason.
"""
from __future__ import annotations

import re

from ...hardware import custom_gpu
from ...model.config import parse_config
from .. import get_engine

MIB = 1024 * 1024


def _cfg(arch, h, layers, heads, kv, ff, vocab, tie=False, head_dim=None, **extra):
    cfg = {"architectures": [arch], "hidden_size": h, "num_hidden_layers": layers, "num_attention_heads": heads,
           "num_key_value_heads": kv, "intermediate_size": ff, "vocab_size": vocab, "tie_word_embeddings": tie,
           "torch_dtype": "bfloat16", "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1e6}
    if head_dim:
        cfg["head_dim"] = head_dim
    cfg.update(extra)
    return parse_config(cfg, arch)


QWEN3_MOE = dict(num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768, decoder_sparse_step=1,
                 norm_topk_prob=True)
LLAMA31_8B = ("LlamaForCausalLM", 4096, 32, 32, 8, 14336, 128256)
QWEN25_32B = ("Qwen2ForCausalLM", 5120, 64, 40, 8, 27648, 152064)
QWEN3_4B = dict(args=("Qwen3ForCausalLM", 2560, 36, 32, 8, 9728, 151936), tie=True, head_dim=128)
QWEN36_27B = dict(args=("Qwen3_5ForCausalLM", 5120, 64, 24, 4, 17408, 248320), head_dim=256, model_type="qwen3_5_text",
                  linear_num_key_heads=16, linear_num_value_heads=48, linear_key_head_dim=128,
                  linear_value_head_dim=128, linear_conv_kernel_dim=4, full_attention_interval=4)
QWEN3_30B = dict(args=("Qwen3MoeForCausalLM", 2048, 48, 32, 4, 6144, 151936), head_dim=128, **QWEN3_MOE)
GLM4_32B = dict(args=("Glm4ForCausalLM", 6144, 61, 48, 2, 23040, 151552), head_dim=128, model_type="glm4",
                attention_bias=False, partial_rotary_factor=0.5)
GEMMA3_4B = dict(args=("Gemma3ForCausalLM", 2560, 34, 8, 4, 10240, 262208), tie=True, head_dim=256,
                 model_type="gemma3_text", sliding_window=1024, query_pre_attn_scalar=256)
DSCODER_V2_LITE = dict(args=("DeepseekV2ForCausalLM", 2048, 27, 16, 16, 10944, 102400), model_type="deepseek_v2",
                       kv_lora_rank=512, q_lora_rank=None, qk_nope_head_dim=128, qk_rope_head_dim=64,
                       v_head_dim=128, n_routed_experts=64, n_shared_experts=2, num_experts_per_tok=6,
                       moe_intermediate_size=1408, first_k_dense_replace=1, moe_layer_freq=1)

# case id -> (engine, version, model shape, settings in the engine's names)
PLANS = {
    "llamacpp-ollama-runpod-llama31-8b-lora-ctx8192-4seq": (
        "ollama", "0.3.8", dict(args=LLAMA31_8B), {"gguf_type": "Q4_K_M", "gpu_free_mib": [23818]}),
    "llamacpp-ollama-llama31-8b-q4_0-t4-kaggle-8k-np4": (
        "ollama", "0.3.8", dict(args=LLAMA31_8B), {"gguf_type": "Q4_0", "gpu_free_mib": [14992]}),
    "llamacpp-dsr1-distill-qwen32b-q4km-4x3090-ngl65": (
        "llamacpp", "b4500", dict(args=QWEN25_32B),
        {"gguf_type": "Q4_K_M", "n_gpu_layers": 65, "n_ctx": 8192, "num_gpus": 4,
         "device_free_mib": (23982, 23982, 23982, 23923)}),
    "llamacpp-dsr1-distill-qwen32b-q4km-4x3090-ngl-minus1-zero": (
        "llamacpp", "b4500", dict(args=QWEN25_32B),
        {"gguf_type": "Q4_K_M", "n_gpu_layers": -1, "n_ctx": 8192, "num_gpus": 4}),
    "llamacpp-pyllama-mistral7b-q4km-4060laptop-ngl20-768": (
        "llamacpp", "b6150", dict(args=("MistralForCausalLM", 4096, 32, 32, 8, 14336, 32000)),
        # (TheBloke's Dec 2023 file: quantized before the loader's sorted weights_map, convert's tensor order)
        {"gguf_type": "Q4_K_M", "n_gpu_layers": 20, "n_ctx": 768, "n_batch": 256, "n_ubatch": 256, "flash_attn": "on",
         "gguf_order": "convert"}),
    "llamacpp-b7342-qwen3-coder-30b-a3b-q8-a100-40g-64k-np4": (
        "llamacpp", "b7342", QWEN3_30B, {"gguf_type": "Q8_0", "n_ctx": 65536}),
    "llamacpp-b5622-qwen3-30b-a3b-q4km-4090-5090-experts-cpu": (
        "llamacpp", "b5622", QWEN3_30B,
        {"gguf_type": "Q4_K_M", "n_gpu_layers": 99, "n_ctx": 16384, "flash_attn": "off", "num_gpus": 2,
         "override_tensor": ("exps=CPU",), "device_free_mib": (9862, 31518)}),
    "llamacpp-phi3-mini-4k-q4km-3070-tgwebui-4k": (
        "llamacpp", "b5800", dict(args=("Phi3ForCausalLM", 3072, 32, 32, 32, 8192, 32064)),
        {"gguf_type": "Q4_K_M", "n_gpu_layers": 33, "n_ctx": 4096, "n_batch": 256, "n_ubatch": 256}),
    "llamacpp-ollama-qwen3-4b-q4km-4g-full-fa-q8kv": (
        "ollama", "0.12.0", QWEN3_4B, {"gguf_type": "Q4_K_M", "num_ctx": 4096, "flash_attention": True,
                                       "kv_cache_type": "q8_0", "os": "windows", "gpu_free_mib": [3801]}),
    "llamacpp-ollama-qwen3-4b-q4km-4g-partial26-f16kv": (
        "ollama", "0.12.0", QWEN3_4B, {"gguf_type": "Q4_K_M", "num_ctx": 4096, "flash_attention": False,
                                       "os": "windows", "num_gpu": 26, "gpu_free_mib": [3801]}),
    "llamacpp-glm-z1-32b-iq4xs-3090ti-32k-fa": (
        "llamacpp", "b5274", GLM4_32B,
        {"gguf_type": "IQ4_XS", "n_gpu_layers": 99, "n_ctx": 32768, "n_batch": 2048, "n_ubatch": 512,
         "flash_attn": "on"}),
    "llamacpp-llamasharp-gemma3-4b-q6k-4080s-131k-ngl20": (
        "llamacpp", "b5000", GEMMA3_4B,
        {"gguf_type": "Q6_K", "n_gpu_layers": 20, "n_ctx": 131072, "n_batch": 512, "n_ubatch": 512}),
    # Ollama 0.32.13 runs its bundled llama-server (build 7342, ollama releases.py) on a 2024 blob converted
    # before the MLA split (attn_kv_b only: the log's K of 192 per head); the figures are llama-server's own
    "llamacpp-ollama-0.32-dscoder-v2-lite-q5km-16g-ctx8192": (
        "llamacpp", "b7342", DSCODER_V2_LITE,
        {"gguf_type": "Q5_K_M", "gguf_mla_split": False, "n_ctx": 8192, "n_batch": 512, "n_ubatch": 512,
         "n_parallel": 1, "flash_attn": "auto"}),
    "llamacpp-qwen36-27b-udq4kxl-5090-131k-q8kv": (
        "llamacpp", "b7600", QWEN36_27B,
        {"n_ctx": 131072, "type_k": "q8_0", "type_v": "q8_0", "flash_attn": "on"}),
}
# figure kinds a planned case leaves out, and why (the rest of the case is compared)
NOT_COMPARED = {
    "llamacpp-qwen36-27b-udq4kxl-5090-131k-q8kv": (
        ("model", "vram", "host"),
        "Unsloth UD-Q4_K_XL mix: the log prints only the file type (Q4_K - Medium) and no per-tensor-type "
        "counts, so the model buffers are not derivable without the file; KV, RS, compute and output are"),
}
NOT_PLANNED = {
    "llamacpp-ik-dsr1-mla3-q8kv-16k-3gpu-draft": "ik_llama.cpp fork",
    "llamacpp-ik259-dsr1-mla-q8kv-32k-8470mib-compute": "ik_llama.cpp fork",
    "llamacpp-dsv3-0324-udq2kxl-5090-2x4090-a6000-16k": "Unsloth UD mix (no stock tensor types)",
    "llamacpp-gemma4-12b-qat-5070laptop-swa-np-sweep": "file not quoted (QAT mix)",
    "llamacpp-fit-qwen36-35b-a3b-udq4km-5060ti-16g": "Unsloth UD mix, hybrid model",
    "llamacpp-fork-qwen38-27b-q5km-5060ti-3060-262k-np2-um": "unnamed fork, UD mix, hybrid model",
}
_HOST_KEYS = ("cpu_mapped_model_buffer_mib", "cpu_model_buffer_mib", "cuda_host_model_buffer_mib", "cpu_kv_buffer_mib",
              "cuda_host_compute_buffer_mib", "cuda_host_output_buffer_mib", "cpu_output_buffer_mib")


def _spec(shape: dict):
    args = shape["args"]
    return _cfg(*args, **{k: v for k, v in shape.items() if k != "args"})


def predict(case_id: str) -> dict:
    """The figures the engine's plan prints for this case (SCHEMA.md keys, MiB), plus vram_/host_ totals."""
    engine_name, version, shape, settings = PLANS[case_id]
    engine = get_engine(engine_name)
    gpu = custom_gpu(48 * 2**30)
    b = engine.plan(_spec(shape), gpu, dict(settings), engine.releases.resolve(version))
    out = {f.key: f.value for f in b.engine_figures if f.schema}
    out["vram_with_context_cuda0_mib"] = b.figure("vram_cuda0_bytes", 0) / MIB
    return out


def _devices(figures: dict) -> list[str]:
    return sorted({m.group(1) for k in figures if (m := re.match(r"(cuda\d+)_model_buffer_mib$", k))})


def compare(case: dict) -> list[tuple[str, str, float, float]]:
    """(kind, figure, predicted, observed) for each figure the log prints and the plan has (MiB)."""
    obs, pred = case["observed"], predict(case["id"])
    rows = []
    for key, value in obs.items():
        m = re.match(r"(cuda\d+|cpu_mapped|cpu|cuda_host)_(model|kv|rs|compute|output)_buffer_mib$", key)
        if m and key in pred:
            rows.append((m.group(2), key, pred[key], value))
    for dev in _devices(obs):
        parts = [f"{dev}_{k}_buffer_mib" for k in ("model", "kv", "compute")]
        if all(p in obs for p in parts):
            rows.append(("vram", f"{dev} VRAM", sum(pred.get(p, 0) for p in parts), sum(obs[p] for p in parts)))
    host = [k for k in _HOST_KEYS if k in obs]
    if any("model" in k for k in host) and "cuda_host_compute_buffer_mib" in obs:
        rows.append(("host", "host RAM", sum(pred.get(k, 0) for k in host), sum(obs[k] for k in host)))
    skip = NOT_COMPARED.get(case["id"], ((), ""))[0]
    return [row for row in rows if row[0] not in skip]
