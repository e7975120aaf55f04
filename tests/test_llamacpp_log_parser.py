"""Every observed figure of every llama.cpp / Ollama dev case is read back from its log lines, except the
figures the curator took from outside llama.cpp's lines (listed with the reason)."""
import json
import re
from pathlib import Path

from vram_detective.engines.llamacpp.log_parser import parse

CASES = Path(__file__).resolve().parents[1] / "groundtruth" / "dev-llamacpp.jsonl"

# figures that are not in a llama.cpp/Ollama log line of the excerpt
NOT_IN_LINES = re.compile(r"^(nvidia_smi_.*|held_mib_.*|kv_mib_G\d+|ctx\d+_.*|gpu_usable_mib|gpu_total_mib_approx|"
                          r"approx_gpu_used_mib|gpu_layers_range|kv_(size_mib|cells)_262144_case)$")
EXCEPTIONS = {
    # same session as the -ngl -1 case: the free-memory and file-size lines are in that excerpt, not this one
    ("llamacpp-dsr1-distill-qwen32b-q4km-4x3090-ngl65", "device_free_mib"),
    ("llamacpp-dsr1-distill-qwen32b-q4km-4x3090-ngl65", "file_size_gib"),
    # llama-bench's result table ("20.60 GiB"), not a load line
    ("llamacpp-fit-qwen36-35b-a3b-udq4km-5060ti-16g", "file_size_gib"),
    # the author's prose ("2237 MiB of 3801 MiB free")
    ("llamacpp-ollama-qwen3-4b-q4km-4g-partial26-f16kv", "device_free_mib"),
    ("llamacpp-ollama-qwen3-4b-q4km-4g-full-fa-q8kv", "device_free_mib"),
}


def _cases():
    return [json.loads(line) for line in CASES.read_text().splitlines() if line.strip()]


def test_every_observed_figure_is_recovered():
    missed, checked = [], 0
    for case in _cases():
        parsed = parse(case["log"])
        for key, value in case["observed"].items():
            if NOT_IN_LINES.match(key) or (case["id"], key) in EXCEPTIONS:
                continue
            checked += 1
            if parsed.get(key) != value:
                missed.append((case["id"], key, value, parsed.get(key)))
    assert missed == []
    assert checked == 259


def test_eras_of_the_same_figure():
    old = parse("llm_load_tensors:      CUDA0 buffer size =  4156.00 MiB\n"
                "llama_new_context_with_model: KV self size  = 1024.00 MiB, K (f16):  512.00 MiB, V (f16):  512.00 MiB")
    new = parse("load_tensors:        CUDA0 model buffer size =  4156.00 MiB\n"
                "llama_kv_cache: size = 1024.00 MiB (  8192 cells,  32 layers,  1/1 seqs), K (f16): 512.00 MiB, "
                "V (f16): 512.00 MiB")
    assert old["cuda0_model_buffer_mib"] == new["cuda0_model_buffer_mib"] == 4156.0
    assert old["kv_size_mib"] == new["kv_size_mib"] == 1024.0
    assert new["kv_cells"] == 8192 and new["kv_layers"] == 32


def test_ollama_estimate_line():
    line = ('msg="offload to cuda" layers.requested=-1 memory.available="[14.6 GiB]" memory.required.full="6.2 GiB" '
            'memory.weights.nonrepeating="411.0 MiB" memory.graph.partial="677.5 MiB"')
    got = parse(line)
    assert got == {"ollama_memory_available_gib": 14.6, "ollama_required_full_gib": 6.2,
                   "ollama_weights_nonrepeating_mib": 411.0, "ollama_graph_partial_mib": 677.5}
