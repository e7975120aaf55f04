"""Issue 23, schema 2: each engine's own figures nested under its name, the figures every engine has at the
top, no flat copy of an engine's figure (explain, whatif, fit; the library's answer is the JSON's)."""
from __future__ import annotations

import pytest

from vram_detective import library
from vram_detective.advisor.answers import COMMON_ROW_KEYS
from vram_detective.render import to_json

MODEL = "Qwen/Qwen3-8B"
ENGINES = {
    "vllm": ("H100", {"max_model_len": 8192}, {"num_gpu_blocks", "budget_gib", "vllm_version"}),
    "sglang": ("H100", {"context_length": 8192}, {"max_total_num_tokens", "mem_fraction_static"}),
    "llamacpp": ("4090", {"gguf_type": "Q4_K_M", "n_ctx": 8192}, {"layers_on_gpu", "cuda0_kv_buffer_mib"}),
    "ollama": ("4090", {"gguf_type": "Q4_K_M", "num_ctx": 8192}, {"layers_on_gpu", "cuda0_kv_buffer_mib"}),
}
COMMON = {"weights_gib", "kv_cache_gib", "kv_cache_tokens", "max_concurrency", "max_model_len", "nvidia_smi_used_mib"}


@pytest.mark.parametrize("engine", ENGINES)
def test_explain_nests_the_engines_own_figures(engine):
    gpu, settings, own_keys = ENGINES[engine]
    out = to_json(library.explain(MODEL, gpu, engine=engine, **settings))
    assert out["schema_version"] == library.SCHEMA_VERSION == 3 and out["engine_name"] == engine
    assert COMMON <= set(out) and own_keys <= set(out[engine])
    assert not set(out[engine]) & set(out)  # no flat duplicate of an engine's figure
    assert not {name for name in ENGINES if name != engine} & set(out)


@pytest.mark.parametrize("engine", ENGINES)
def test_whatif_rows_nest_the_engines_own_figures(engine):
    gpu, settings, _ = ENGINES[engine]
    data = library.whatif(MODEL, gpu, engine=engine, **settings).to_dict()
    rows = data["rows"] if "rows" in data else [data["baseline"], *data["levers"]]
    nested = [row[engine] for row in rows if engine in row]
    assert len(nested) == len(rows)  # every engine has a figure of its own in each row
    for row in rows:
        assert set(row) - {engine} <= set(COMMON_ROW_KEYS), row.keys()
    if "rows" not in data:  # vLLM: its V0/V1 path under its name, the release once (engine_version)
        assert data["vllm"] == {"vllm_path": "v1"} and "vllm_version" not in data
        assert {"num_gpu_blocks", "num_cpu_blocks"} <= set(nested[0])


def test_fit_names_the_release_once_and_nests_the_path():
    data = library.fit(MODEL, "H100", engine="vllm", context="8k", top=2).to_dict()
    assert data["engine_version"] and "vllm_version" not in data and data["vllm"] == {"vllm_path": "v1"}
    assert {"num_gpu_blocks", "budget_gib"} <= set(data["candidates"][0]["vllm"])
