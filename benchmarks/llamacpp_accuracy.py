"""llama.cpp dev cases: predicted vs printed model buffer (quant_mix, stock rules), KV buffer, compute buffer.

    PYTHONPATH=src python3 benchmarks/llamacpp_accuracy.py
Model shapes are the public config.json values of the models the cases name (written out below).
"""
from __future__ import annotations

import json
from pathlib import Path

from vram_detective.engines.llamacpp.compute import GraphShape, gpu_compute_bytes, host_compute_bytes
from vram_detective.engines.llamacpp.kv_cache import KvSettings, kv_cache, uniform_layers
from vram_detective.engines.llamacpp.quant_mix import quantized_tensors
from vram_detective.engines.llamacpp.weights import Placement, model_buffers
from vram_detective.model.config import parse_config

MIB = 1024 * 1024
CASES = Path("/work/shared/groundtruth/dev-llamacpp.jsonl")


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
# case id -> (spec, ftype, placement, kv settings, n_ff active for compute, flash_attn, n_ubatch)
PLAN = {
    "llamacpp-dsr1-distill-qwen32b-q4km-4x3090-ngl65": (
        _cfg("Qwen2ForCausalLM", 5120, 64, 40, 8, 27648, 152064), "Q4_K_M",
        Placement(64, 65, ("CUDA0", "CUDA1", "CUDA2", "CUDA3"), (23982, 23982, 23982, 23923)), None),
    "llamacpp-ollama-runpod-llama31-8b-lora-ctx8192-4seq": (
        _cfg("LlamaForCausalLM", 4096, 32, 32, 8, 14336, 128256), "Q4_K_M", Placement(32, 33, mmap=False),
        KvSettings(8192, n_seq_max=4, build=3600)),
    "llamacpp-ollama-llama31-8b-q4_0-t4-kaggle-8k-np4": (
        _cfg("LlamaForCausalLM", 4096, 32, 32, 8, 14336, 128256), "Q4_0", Placement(32, 33, mmap=False),
        KvSettings(8192, n_seq_max=4, build=3600)),
    "llamacpp-pyllama-mistral7b-q4km-4060laptop-ngl20-768": (
        _cfg("MistralForCausalLM", 4096, 32, 32, 8, 14336, 32000), "Q4_K_M", Placement(32, 20),
        KvSettings(768, flash_attn=True, n_ubatch=256, build=6150)),
    "llamacpp-b7342-qwen3-coder-30b-a3b-q8-a100-40g-64k-np4": (
        _cfg("Qwen3MoeForCausalLM", 2048, 48, 32, 4, 6144, 151936, head_dim=128, **QWEN3_MOE), "Q8_0",
        Placement(48, 49), KvSettings(65536, n_seq_max=4, kv_unified=True, flash_attn=True, build=7342)),
    "llamacpp-ollama-qwen3-4b-q4km-4g-full-fa-q8kv": (
        _cfg("Qwen3ForCausalLM", 2560, 36, 32, 8, 9728, 151936, tie=True, head_dim=128), "Q4_K_M",
        Placement(36, 37), KvSettings(4096, type_k="q8_0", type_v="q8_0", flash_attn=True, build=7500)),
    "llamacpp-phi3-mini-4k-q4km-3070-tgwebui-4k": (
        _cfg("Phi3ForCausalLM", 3072, 32, 32, 32, 8192, 32064), "Q4_K_M", Placement(32, 33),
        KvSettings(4096, n_ubatch=256, build=5800)),
}
# compute-buffer shapes for full-offload cases: (n_embd, n_head, n_ff active, n_vocab, n_kv, n_ubatch, FA)
COMPUTE = {
    "llamacpp-ollama-llama31-8b-q4_0-t4-kaggle-8k-np4": (4096, 32, 14336, 128256, 8192, 512, False),
    "llamacpp-phi3-mini-4k-q4km-3070-tgwebui-4k": (3072, 32, 8192, 32064, 4096, 256, False),
    "llamacpp-glm-z1-32b-iq4xs-3090ti-32k-fa": (6144, 48, 23040, 151552, 32768, 512, True),
    "llamacpp-b7342-qwen3-coder-30b-a3b-q8-a100-40g-64k-np4": (2048, 32, 6144, 151936, 65536, 512, True),
    "llamacpp-ollama-runpod-llama31-8b-lora-ctx8192-4seq": (4096, 32, 14336, 128256, 8192, 512, False),
    "llamacpp-b5622-qwen3-30b-a3b-q4km-4090-5090-experts-cpu": (2048, 32, 6144, 151936, 16384, 512, False),
    "llamacpp-dsv3-0324-udq2kxl-5090-2x4090-a6000-16k": (7168, 128, 18432, 129280, 16384, 1024, True),
    "llamacpp-ollama-0.32-dscoder-v2-lite-q5km-16g-ctx8192": (2048, 16, 10944, 102400, 8192, 512, False),
}


def _row(case: dict) -> list[str]:
    obs, cells = case["observed"], [case["id"][9:57]]
    plan = PLAN.get(case["id"])
    if plan:
        spec, ftype, placement, kv = plan
        bufs = model_buffers(quantized_tensors(spec, ftype), placement)
        got, want = bufs.get("CUDA0", 0) / MIB, obs.get("cuda0_model_buffer_mib")
        cells.append(f"{got:9.2f} vs {want} ({(got - want) / want:+.1%})" if want else "-")
        if kv and "cuda0_kv_buffer_mib" in obs:
            on_gpu = {il: "CUDA0" for il in range(spec.num_layers) if il >= spec.num_layers - placement.n_gpu_layers}
            layers = uniform_layers(spec.num_layers, spec.num_kv_heads, spec.head_dim)
            devs = [on_gpu.get(il, "CPU") for il in range(spec.num_layers)]
            pred = dict(kv_cache(layers, devs, kv).per_device).get("CUDA0", 0) / MIB
            cells.append("exact" if pred == obs["cuda0_kv_buffer_mib"] else f"{pred} vs {obs['cuda0_kv_buffer_mib']}")
        else:
            cells.append("-")
    else:
        cells += ["(no stock mix)", "tests"]
    cells.append(_compute(case["id"], obs))
    return cells


def _compute(case_id: str, obs: dict) -> str:
    shape = COMPUTE.get(case_id)
    if not shape or "cuda0_compute_buffer_mib" not in obs:
        return "-"
    n_embd, n_head, n_ff, vocab, n_kv, n_ub, fa = shape
    gpu = gpu_compute_bytes(GraphShape(n_embd, n_head, n_ff, vocab), n_kv, n_ub, fa) / MIB
    host = host_compute_bytes(n_kv, n_ub, n_embd) / MIB
    want, want_host = obs["cuda0_compute_buffer_mib"], obs.get("cuda_host_compute_buffer_mib")
    text = f"{gpu:.1f} vs {want} ({(gpu - want) / want:+.1%})"
    if want_host:
        text += f"; host {host:.2f} vs {want_host}"
    return text


def main() -> None:
    cases = [json.loads(line) for line in CASES.read_text().splitlines() if line.strip()]
    print(f"{'case':48} | {'CUDA0 model MiB (pred vs log)':34} | KV CUDA0 | compute CUDA0 (pred vs log)")
    for case in cases:
        print(" | ".join(_row(case)))


if __name__ == "__main__":
    main()
