"""Several GPUs: one bar and one nvidia-smi figure per GPU for every engine (issue 27), on the terminal at 80
columns, in `--json` (a per-GPU list whose figures add up to the totals) and in `--html`; one GPU stays as it was.
The per-GPU figures come from each engine's own placement (llama.cpp's buffers per device, vLLM's ranks and
pipeline stages, SGLang's TP ranks, Ollama's llama.cpp split), never from dividing a total."""
from __future__ import annotations

import json
import re

import pytest

from vram_detective import api
from vram_detective.cli import main
from vram_detective.render import to_json

COLUMNS = 80
GIB, MIB = 1 << 30, 1 << 20
# the issue's case: a 32B at Q8_0 over two 4090s (-ts 1,1) was one card "weights 39.00 ... free 0.00 GiB"
LLAMACPP_SPLIT = ("Qwen/Qwen3-32B", "--engine", "llamacpp", "--gguf-type", "Q8_0", "--gpu", "RTX 4090", "-ngl", "99",
                  "-c", "8192", "-ts", "1,1")
CASES = {
    "llamacpp -ts 1,1": LLAMACPP_SPLIT,
    "vllm TP 2": ("meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "-tp", "2", "--max-model-len", "8192"),
    "vllm PP 2": ("meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "-pp", "2", "--max-model-len", "8192"),
    "sglang TP 2": ("Qwen/Qwen3-8B", "--engine", "sglang", "--gpu", "H100", "-tp", "2"),
    "ollama 2 GPUs": ("meta-llama/Llama-3.1-70B-Instruct", "--engine", "ollama", "--gpu", "RTX 4090", "--num-gpus", "2"),
}
LEGEND = re.compile(r"█ weights ([\d.]+)\s+▓ KV pool ([\d.]+)\s+▒ [a-z, ]+ ([\d.]+)\s+· free ([\d.]+) GiB")


def _run(args, capsys, monkeypatch) -> tuple[int, str]:
    monkeypatch.setenv("COLUMNS", str(COLUMNS))
    code = main(list(args))
    return code, capsys.readouterr().out


def _json(args, capsys, monkeypatch) -> dict:
    code, out = _run([*args, "--json"], capsys, monkeypatch)
    assert code == 0
    return json.loads(out)


@pytest.mark.parametrize("case", CASES)
def test_terminal_draws_one_bar_per_gpu_within_80_columns(case, capsys, monkeypatch):
    code, out = _run(["explain", *CASES[case]], capsys, monkeypatch)
    figures = _json(["explain", *CASES[case]], capsys, monkeypatch)
    assert code == 0
    lines = out.splitlines()
    assert [line for line in lines if len(line) > COLUMNS] == []
    head = lines[: next(i for i, line in enumerate(lines) if not line.strip())]  # the answer, before the tables
    bars = [line for line in head if line.startswith("[") and line.endswith("]")]
    legends = [LEGEND.search(" ".join(head[i + 1: i + 3])) for i, line in enumerate(head) if line in bars]
    assert len(bars) == len(figures["devices"]) == 2, head
    for device, legend in zip(figures["devices"], legends):
        assert f"{device['name']} (" in out and f"nvidia-smi ≈ {device['nvidia_smi_used_mib']:,} MiB" in out
        weights, kv, rest, free = (float(x) for x in legend.groups())
        # each bar is one card: its parts and what is free make the card, never two cards' weights on one
        assert weights + kv + rest + free == pytest.approx(figures["total_gpu_gib"], abs=0.02)
        assert weights == pytest.approx(device["weights_gib"], abs=0.006) and free > 0.5
        assert free == pytest.approx(device["free_gib"], abs=0.006)


def test_the_issue_split_is_two_cards_each_with_room(capsys, monkeypatch):
    """The bug: weights 39.00 (both GPUs') on one 23.58 GiB card with 0.00 free. Now each GPU shows its own
    layers' weights: CUDA0 and CUDA1's model buffers, as the build prints them."""
    figures = _json(["explain", *LLAMACPP_SPLIT], capsys, monkeypatch)
    own = figures["llamacpp"]
    gpu0, gpu1 = figures["devices"]
    assert gpu0["weights_gib"] * 1024 == pytest.approx(own["cuda0_model_buffer_mib"], abs=0.5)
    assert gpu1["weights_gib"] * 1024 == pytest.approx(own["cuda1_model_buffer_mib"], abs=0.5)
    assert gpu0["kv_cache_gib"] * 1024 == pytest.approx(own["cuda0_kv_buffer_mib"], abs=0.5)
    assert gpu1["kv_cache_gib"] * 1024 == pytest.approx(own["cuda1_kv_buffer_mib"], abs=0.5)
    assert abs(gpu0["nvidia_smi_used_mib"] - own["vram_cuda0_gib"] * 1024) < 1  # its buffers and its CUDA context
    assert abs(gpu1["nvidia_smi_used_mib"] - own["vram_cuda1_gib"] * 1024) < 1
    assert gpu1["nvidia_smi_used_mib"] != gpu0["nvidia_smi_used_mib"]  # the last GPU holds the output layer
    assert gpu0["role"] == "CUDA0: 33 layers" and gpu1["role"] == "CUDA1: 32 layers"
    assert all(d["free_gib"] > 5 for d in (gpu0, gpu1))


@pytest.mark.parametrize("case", CASES)
def test_json_per_gpu_figures_add_up(case, capsys, monkeypatch):
    figures = _json(["explain", *CASES[case]], capsys, monkeypatch)
    devices, total = figures["devices"], figures["all_gpus"]
    assert total["gpus"] == len(devices) == 2
    for d in devices:
        # weights + KV + the rest = what nvidia-smi shows on that GPU; with what is free = the card
        assert (d["weights_gib"] + d["kv_cache_gib"] + d["other_gib"]) * 1024 == pytest.approx(
            d["nvidia_smi_used_mib"], abs=1.0)
        assert d["weights_gib"] + d["kv_cache_gib"] + d["other_gib"] + d["free_gib"] == pytest.approx(
            d["total_gib"], abs=0.001)
        assert d["total_gib"] == figures["total_gpu_gib"]
        assert sum(p["gib"] for p in d["parts"]) * 1024 == pytest.approx(d["nvidia_smi_used_mib"], abs=8)
    for key in ("weights_gib", "kv_cache_gib", "other_gib", "free_gib", "total_gib"):
        assert sum(d[key] for d in devices) == pytest.approx(total[key], abs=0.001)
    assert sum(d["nvidia_smi_used_mib"] for d in devices) == total["nvidia_smi_used_mib"]
    # GPU 0 is the GPU the top-level (single-GPU) figure always described
    assert devices[0]["nvidia_smi_used_mib"] == figures["nvidia_smi_used_mib"]


@pytest.mark.parametrize("case", ["llamacpp -ts 1,1", "ollama 2 GPUs"])
def test_llamacpp_gpus_add_up_to_the_whole_model(case, capsys, monkeypatch):
    """llama.cpp's top-level weights and KV are over all GPUs (its buffers summed): the GPUs add up to them."""
    figures = _json(["explain", *CASES[case]], capsys, monkeypatch)
    assert figures["all_gpus"]["weights_gib"] == pytest.approx(figures["weights_gib"], abs=0.001)
    assert figures["all_gpus"]["kv_cache_gib"] == pytest.approx(figures["kv_cache_gib"], abs=0.001)


def test_vllm_tensor_parallel_ranks_each_hold_the_rank_figures(capsys, monkeypatch):
    figures = _json(["explain", *CASES["vllm TP 2"]], capsys, monkeypatch)
    for rank, d in enumerate(figures["devices"]):
        assert d["name"] == f"GPU {rank}" and d["role"] == f"rank {rank}, TP rank {rank}"
        assert d["weights_gib"] == figures["weights_gib"] and d["kv_cache_gib"] <= figures["kv_cache_gib"]
        assert d["nvidia_smi_used_mib"] == figures["nvidia_smi_used_mib"]


def test_vllm_pipeline_stages_differ_and_add_up_to_the_model(capsys, monkeypatch):
    """Each stage holds its own layers (the embedding on the first, the LM head on the last): the two GPUs' weights
    make one GPU's whole model (within one allocator segment per stage), and each its own pool and figure."""
    whole = _json(["explain", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--max-model-len", "8192"],
                  capsys, monkeypatch)
    assert "devices" not in whole and "all_gpus" not in whole  # one GPU: as before
    figures = _json(["explain", *CASES["vllm PP 2"]], capsys, monkeypatch)
    stage0, stage1 = figures["devices"]
    assert stage0["role"] == "rank 0, stage 0" and stage1["role"] == "rank 1, stage 1"
    assert stage0["weights_gib"] + stage1["weights_gib"] == pytest.approx(whole["weights_gib"], abs=0.05)
    assert stage0["nvidia_smi_used_mib"] != stage1["nvidia_smi_used_mib"]
    assert [r["weights_gib"] for r in figures["per_rank"]] == [stage0["weights_gib"], stage1["weights_gib"]]
    assert [r["kv_pool_gib"] for r in figures["per_rank"]] == [stage0["kv_cache_gib"], stage1["kv_cache_gib"]]


def test_sglang_data_parallel_replicas_have_their_own_gpus():
    """--dp-size 2 --tp-size 2: two replicas of a TP group, GPUs 0-3 (data_parallel_controller.py); with
    --enable-dp-attention the replicas share the TP group's two GPUs."""
    b = api.explain("Qwen/Qwen3-8B", "H100", engine="sglang", tp_size=2, dp_size=2)
    assert [d.name for d in b.devices] == ["GPU 0", "GPU 1", "GPU 2", "GPU 3"]
    assert [d.role for d in b.devices] == ["TP rank 0, DP 0", "TP rank 1, DP 0", "TP rank 0, DP 1", "TP rank 1, DP 1"]
    shared = api.explain("Qwen/Qwen3-8B", "H100", engine="sglang", tp_size=2, dp_size=2, enable_dp_attention=True)
    assert len(shared.devices) == 2


def test_one_gpu_stays_as_it_was(capsys, monkeypatch):
    for engine in ("vllm", "sglang", "llamacpp", "ollama"):
        b = api.explain("Qwen/Qwen3-8B", "H100", engine=engine)
        assert b.devices == () and "devices" not in to_json(b)
    code, out = _run(["explain", "Qwen/Qwen3-8B", "--gpu", "H100", "--engine", "llamacpp"], capsys, monkeypatch)
    assert code == 0 and "GPU 0" not in out.split("\n\n")[0]
    assert sum(1 for line in out.splitlines() if line.startswith("[") and line.endswith("]")) == 1


def test_many_gpus_share_a_bar_per_run_of_equal_ranks(capsys, monkeypatch):
    """TP 8 x PP 2 is 16 GPUs: one bar per stage's ranks ("GPU 0-7 (each)"), the JSON still one entry per GPU."""
    args = ["explain", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "H100", "-tp", "8", "-pp", "2",
            "--max-model-len", "8192"]
    code, out = _run(args, capsys, monkeypatch)
    assert code == 0 and max(len(line) for line in out.splitlines()) <= COLUMNS
    assert "GPU 0-7 (each): nvidia-smi" in out and "GPU 8-15 (each): nvidia-smi" in out
    assert len(_json(args, capsys, monkeypatch)["devices"]) == 16


def test_html_report_has_a_bar_per_gpu(tmp_path, capsys, monkeypatch):
    figures = _json(["explain", *LLAMACPP_SPLIT], capsys, monkeypatch)
    target = tmp_path / "split.html"
    code, _ = _run(["explain", *LLAMACPP_SPLIT, "--html", str(target)], capsys, monkeypatch)
    html = target.read_text()
    assert code == 0 and html.count('<div class="gpu"') == 2 and html.count('<svg class="bar"') == 2
    for d in figures["devices"]:
        assert f'data-gpu="{d["name"]}" data-used-mib="{d["nvidia_smi_used_mib"]}"' in html
    assert "weights 39" not in html and "free <b>0.00 GiB</b>" not in html


def test_launch_lines_write_lists_as_the_engine_reads_them():
    """The web page's copy button: `-ts 1,1` (llama.cpp reads commas), never the tuple's repr."""
    from vram_detective.engines import get_engine

    llamacpp, ollama = get_engine("llamacpp"), get_engine("ollama")
    line = llamacpp.launch_line("m.gguf", {"tensor_split": (1.0, 1.0), "override_tensor": ("exps=CPU", "x=CUDA0")})
    assert line == "llama-server -m m.gguf -ts 1,1 -ot exps=CPU,x=CUDA0"
    assert llamacpp.launch.parse(line.split()).settings["tensor_split"] == (1.0, 1.0)
    assert ollama.launch_line("qwen2.5:7b", {"num_gpus": 2}) == "CUDA_VISIBLE_DEVICES=0,1 ollama run qwen2.5:7b"
    assert ollama.launch.parse("CUDA_VISIBLE_DEVICES=0,1 ollama run qwen2.5:7b".split()).settings == {"num_gpus": 2}


def test_compare_shows_each_gpu(capsys, monkeypatch):
    """`compare -tp 2`: the nvidia-smi and weights rows give each GPU's figure (llama.cpp's two GPUs differ: the
    last holds the output layer), or one figure "each" when the ranks agree, as the engines' --json lists them."""
    args = ["compare", "Qwen/Qwen3-8B", "--gpu", "H100 SXM", "-tp", "2", "--context", "16k"]
    answers = {e["engine_name"]: e for e in _json(args, capsys, monkeypatch)["engines"]}
    code, out = _run(args, capsys, monkeypatch)
    assert code == 0 and max(len(line) for line in out.splitlines()) <= COLUMNS
    row = next(line for line in out.splitlines() if line.startswith("│ nvidia-smi used"))
    gpu0, gpu1 = (d["nvidia_smi_used_mib"] for d in answers["llamacpp"]["devices"])
    assert gpu0 != gpu1 and f"{gpu0:,} / {gpu1:,} MiB" in row
    for engine in ("vllm", "sglang"):
        used = {d["nvidia_smi_used_mib"] for d in answers[engine]["devices"]}
        assert len(used) == 1 and f"{used.pop():,} MiB each" in row


def _case(file: str, case_id: str) -> dict:
    from conftest import GROUNDTRUTH, read_jsonl

    return next(row for row in read_jsonl(GROUNDTRUTH / file) if row["id"] == case_id)


def test_logs_of_a_two_gpu_llamacpp_run_draw_each_gpu(tmp_path, capsys, monkeypatch):
    """A real llama.cpp log over an RTX 4090 and an RTX 5090 (buffers printed per device): `logs` draws one bar per
    GPU, each its own printed buffers and CUDA context over its own card (the 5090's 32,607 MiB for GPU 1), on the
    terminal at 80 columns, in --json and in --html."""
    from vram_detective.engines import get_engine

    case = _case("dev-llamacpp.jsonl", "llamacpp-b5622-qwen3-30b-a3b-q4km-4090-5090-experts-cpu")
    log = tmp_path / "two-gpus.log"
    log.write_text(case["log"])
    observed, context = case["observed"], get_engine("llamacpp").cuda_context_bytes() / MIB
    report = _json(["logs", str(log)], capsys, monkeypatch)
    bars = report["answer"]["bars"]
    assert [(b["name"], b["device"]) for b in bars] == [("GPU 0", "CUDA0"), ("GPU 1", "CUDA1")]
    for index, bar in enumerate(bars):
        printed = sum(observed[f"cuda{index}_{kind}_buffer_mib"] for kind in ("model", "kv", "compute"))
        assert bar["used_mib"] == round(printed + context)
        assert bar["weights_gib"] * 1024 == pytest.approx(observed[f"cuda{index}_model_buffer_mib"], abs=1)
    assert [b["total_mib"] for b in bars] == [24564, 32607]  # the two cards the log names
    code, out = _run(["logs", str(log)], capsys, monkeypatch)
    assert code == 0 and max(len(line) for line in out.splitlines()) <= COLUMNS
    assert f"GPU 1 (CUDA1): about {bars[1]['used_mib']:,} MiB of 32,607 MiB" in out
    assert sum(1 for line in out.splitlines() if line.strip().startswith("[") and line.strip().endswith("]")) == 2
    target = tmp_path / "two-gpus.html"
    code, _ = _run(["logs", str(log), "--html", str(target)], capsys, monkeypatch)
    html = target.read_text()
    assert code == 0 and html.count('<div class="gpu"') == 2 and f'data-used-mib="{bars[1]["used_mib"]}"' in html


def test_main_gpu_alone_is_named(capsys, monkeypatch):
    """-sm none -mg 1: the whole model on GPU 1 (llama.cpp's main GPU); the answer says which GPU holds it."""
    args = ["explain", "Qwen/Qwen3-32B", "--engine", "llamacpp", "--gguf-type", "Q4_K_M", "--gpu", "RTX 4090",
            "-ngl", "99", "-c", "8192", "-ts", "1,1", "-sm", "none", "-mg", "1"]
    figures = _json(args, capsys, monkeypatch)
    (device,) = figures["devices"]
    assert device["name"] == "GPU 1" and device["role"] == "CUDA1: 65 layers"
    assert device["nvidia_smi_used_mib"] == figures["nvidia_smi_used_mib"]
    code, out = _run(args, capsys, monkeypatch)
    assert out.splitlines()[0].startswith(f"Starts on llama.cpp b11312: nvidia-smi ≈ "
                                          f"{device['nvidia_smi_used_mib']:,} MiB on GPU 1 of 24,218 MiB")


def test_fit_ceiling_per_gpu_holds_on_every_pipeline_stage(capsys, monkeypatch):
    """`fit --max-gpu-memory 40GiB` with PP 2: the last stage holds more than the first (its LM head, its
    sampler's activations), so the ceiling binds there; every GPU of the answer is under it, not only GPU 0
    (before: utilization 0.54, GPU 1 at 44,415 MiB)."""
    args = ["fit", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100 SXM", "--gpus", "2", "-pp", "2",
            "--context", "8k", "--max-gpu-memory", "40GiB", "--same-checkpoint", "--top", "1"]
    code, out = _run(args, capsys, monkeypatch)
    assert code == 0
    utilization = float(re.search(r"--gpu-memory-utilization\s+([\d.]+)", out).group(1))
    common = dict(pipeline_parallel_size=2, max_model_len=8192)
    chosen = api.explain("meta-llama/Llama-3.1-8B-Instruct", "H100 SXM", gpu_memory_utilization=utilization, **common)
    above = api.explain("meta-llama/Llama-3.1-8B-Instruct", "H100 SXM", gpu_memory_utilization=round(utilization + 0.01, 2),
                        **common)
    ceiling = 40 * 1024
    assert max(d.nvidia_smi_used_mib for d in chosen.devices) <= ceiling
    assert above.devices[0].nvidia_smi_used_mib <= ceiling < above.devices[1].nvidia_smi_used_mib
