"""What a new user sees (issue 15): every command fits 80 and 120 columns, the answer comes first, internal
words stay out, --markdown / --json everywhere, the catalogs filter, ambiguous inputs say how they were read."""
from __future__ import annotations

import json
import re

from vram_detective.intervals import safe_room

import pytest

from vram_detective import api
from vram_detective.cli import main

GIB = 1 << 30


def _seed_breakdown(**settings):
    return api.explain("Qwen/Qwen2.5-7B-Instruct-AWQ", "RTX 4090", engine_version="0.6.3", max_model_len=32768,
                       **settings)


def _seed_first_line() -> str:
    return f"Starts on vLLM 0.6.3 (V0 engine): nvidia-smi ≈ {_seed_breakdown().nvidia_smi_used_mib:,} MiB of 24,218 MiB."

SEED = ["explain", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090", "--max-model-len", "32k",
        "--vllm-version", "0.6.3"]
SMI = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.120                Driver Version: 550.120        CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|=========================================+========================+======================|
|   0  NVIDIA GeForce RTX 4090        Off |   00000000:01:00.0 Off |                  Off |
|  0%   38C    P8             21W /  450W |   10240MiB /  24564MiB |      0%      Default |
+-----------------------------------------+------------------------+----------------------+
"""


@pytest.fixture
def files(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("Loading model weights took 5.2048 GB\n# GPU blocks: 4556\n")
    smi = tmp_path / "smi.txt"
    smi.write_text(SMI)
    return str(log), str(smi)


def _run(args, capsys, monkeypatch, columns=None):
    if columns is not None:
        monkeypatch.setenv("COLUMNS", str(columns))
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


COMMANDS = {
    "explain": SEED,
    "explain-refused": ["explain", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "4090"],
    "explain-common-gpus": ["explain", "Qwen/Qwen3-8B"],
    "explain-sglang": ["explain", "Qwen/Qwen3-8B", "--gpu", "H100", "--engine", "sglang"],
    "explain-llamacpp": ["explain", "Qwen/Qwen3-8B", "--gpu", "4090", "--engine", "llamacpp", "--gguf-type", "Q4_K_M"],
    "explain-tp": ["explain", "Qwen/Qwen3-8B", "--gpu", "4090", "-tp", "2", "--max-model-len", "8k"],
    "whatif": ["whatif", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090", "--max-model-len", "32k"],
    "whatif-refused": ["whatif", "Qwen/Qwen3-8B", "--gpu", "T4"],
    "whatif-sglang": ["whatif", "Qwen/Qwen3-8B", "--gpu", "4090", "--engine", "sglang"],
    "fit": ["fit", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090", "--max-gpu-memory", "12GiB"],
    "fit-nothing": ["fit", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "4090", "--context", "32k"],
    "models": ["models"],
    "gpus": ["gpus"],
    "compare": ["compare", "Qwen/Qwen3-8B", "--gpu", "4090", "--context", "32k"],
}


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("name", [*COMMANDS, "logs"])
def test_every_command_fits_the_terminal(name, columns, capsys, monkeypatch, files):
    args = COMMANDS.get(name) or ["logs", files[0], "--nvidia-smi", files[1]]
    _, out, _ = _run(args, capsys, monkeypatch, columns)
    assert out.strip()
    too_long = [line for line in out.splitlines() if len(line) > columns]
    assert too_long == []


def test_wide_keeps_the_full_table(capsys, monkeypatch):
    _, out, _ = _run(SEED + ["--wide"], capsys, monkeypatch, 80)
    assert max(len(line) for line in out.splitlines()) > 120
    assert "what nvidia-smi shows beyond the budget" in out  # a why cell on its row, uncut


def test_seed_case_answers_in_the_first_six_lines(capsys, monkeypatch):
    code, out, _ = _run(SEED, capsys, monkeypatch, 80)
    first = out.splitlines()[:6]
    assert code == 0
    b = _seed_breakdown()
    assert first[0] == _seed_first_line()
    assert first[1].startswith("[█") and "▓" in first[1] and first[1].endswith("·]")
    legend = re.fullmatch(r" █ weights (\d+\.\d\d)  ▓ KV pool (\d+\.\d\d)  ▒ context, graphs (\d+\.\d\d)  · free "
                          r"(\d+\.\d\d) GiB", first[3])
    assert legend and float(legend[1]) == round(b.weights_bytes / GIB, 2)
    assert float(legend[2]) == round(b.kv_cache_bytes / GIB, 2)
    # the parts add up to the GPU's total (each rounded to 0.01)
    assert abs(sum(float(legend[i]) for i in range(1, 5)) - b.total_gpu_bytes / GIB) <= 0.03
    flat = " ".join(out.split())
    assert f"the {b.activation_peak_bytes / GIB:.2f} GiB profile-run activation peak is freed before the pool is sized" \
        in flat
    smallest = re.search(r"Smallest safe footprint for one 32,768-token request \(room beyond the KV pool's error, "
                         r"as fit counts it\): --gpu-memory-utilization (0\.\d+) → ≈ ([\d,]+) MiB\.", flat)
    at = _seed_breakdown(gpu_memory_utilization=float(smallest[1]))
    assert at.failure is None and f"{at.nvidia_smi_used_mib:,}" == smallest[2] and at.max_concurrency >= 1
    assert safe_room(at).covers  # fit's margin: the room survives the KV pool's error
    below = _seed_breakdown(gpu_memory_utilization=round(float(smallest[1]) - 0.01, 2))
    # the smallest one: below it the engine refuses, or the room lies within the pool's error (borderline)
    assert below.failure is not None or not safe_room(below).covers


@pytest.mark.parametrize("engine, columns", [("vllm", 80), ("sglang", 80), ("llamacpp", 80), ("ollama", 80),
                                             ("vllm", 40), ("llamacpp", 120)])
def test_the_bar_has_a_scale_from_0_to_the_card(engine, columns, capsys, monkeypatch):
    """Issue 27: the terminal bar's axis: 0 under its left end, the card's GiB under its right end, round GiB
    ticks each under the cell that holds that many GiB, no wider than the bar (80 columns at 80)."""
    code, out, _ = _run(["explain", "Qwen/Qwen3-4B", "--gpu", "4090", "--engine", engine], capsys, monkeypatch, columns)
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("[█"))
    bar, axis = lines[at], lines[at + 1]
    assert len(axis) <= len(bar) <= columns
    assert axis.startswith("0 ") and axis.endswith(" 23.65 GiB")
    cells = len(bar) - 2
    ticks = [(m.start(), m.group()) for m in re.finditer(r"\d+(?:\.\d+)?", axis[: -len(" 23.65 GiB")])]
    assert len(ticks) >= 3  # 0 and at least two round figures between
    values = [float(text) for _, text in ticks]
    assert values == sorted(values) and len(set(values)) == len(values)
    for start, text in ticks[1:]:
        centre = start + len(text) / 2  # the cell under the label's middle
        assert abs((centre - 1) * 23.65 / cells - float(text)) <= 23.65 / cells * 1.5


def test_refusal_comes_first_without_meaningless_figures(capsys, monkeypatch):
    code, out, _ = _run(["explain", "Qwen/Qwen3-8B", "--gpu", "4090", "--max-model-len", "32k", "--engine-version",
                         "0.33.0"], capsys, monkeypatch, 80)
    lines = out.splitlines()
    assert code == 1
    assert lines[0].startswith("vLLM 0.33.0 (V1 engine) would refuse to start: To serve at least one request")
    assert "The longest context that fits: 32,720 tokens." in lines[:5]
    assert 'try: vram-detective fit Qwen/Qwen3-8B --gpu "4090" --context 32768' in lines[:6]
    assert "max concurrency at" not in out and "expected nvidia-smi used" not in out and "Starts on" not in out


def test_common_gpu_table_shows_no_figures_for_a_refused_start(capsys, monkeypatch):
    _, out, _ = _run(COMMANDS["explain-common-gpus"], capsys, monkeypatch, 120)
    t4 = next(line for line in out.splitlines() if line.startswith("│ T4 "))
    assert t4.split("│")[4:7] == ["      - ", "         - ", "           - "] or t4.count(" - ") == 3
    assert "0.00x" not in out
    assert "does not start: CUDA out of memory while loading the weights: 15.27 GiB per GPU do not fit in 14.56 GiB." \
        in " ".join(out.replace("│", " ").split())


def test_every_engine_gets_a_verdict(capsys, monkeypatch):
    _, out, _ = _run(COMMANDS["explain-sglang"], capsys, monkeypatch, 100)
    assert out.startswith("Starts on SGLang 0.5.23: nvidia-smi ≈ ")
    assert "pre-allocated to fill mem_fraction_static" in out
    _, out, _ = _run(COMMANDS["explain-llamacpp"], capsys, monkeypatch, 100)
    # b11312's defaults: n_ctx 0 = the model's 40,960 (common.h), which fits, so the automatic fit keeps it
    assert out.startswith("Starts on llama.cpp b11312: nvidia-smi ≈ 10,849 MiB of 24,218 MiB.")
    assert "pre-allocated" not in out  # a sum of buffers, no budget fraction


def test_theory_table_gives_the_whole_model_and_per_gpu(capsys, monkeypatch):
    _, out, _ = _run(COMMANDS["explain-tp"], capsys, monkeypatch, 120)
    assert "theory vs reality (weights, per GPU)" in out
    assert "whole model: " in out and "GiB of weights over 2 GPUs" in out
    assert "on each of 2 GPUs" in out.splitlines()[0]


def test_internal_words_only_under_verbose(capsys, monkeypatch):
    _, out, _ = _run(SEED, capsys, monkeypatch, 120)
    for word in ("V0-c", "#2863", "design/vllm-memory.md", "era V0"):
        assert word not in out
    _, out, _ = _run(SEED + ["--verbose"], capsys, monkeypatch, 120)
    assert "#2863" in out and "V0-c" in out


def test_logs_leave_out_the_sizing_count_and_negative_parts(capsys, monkeypatch, files):
    _, out, _ = _run(["logs", files[0], "--nvidia-smi", files[1]], capsys, monkeypatch, 120)
    assert "sizings" not in out
    assert "Catalog models consistent with the logged weights and KV figures:" in out
    assert "-> ~-" not in out and "remaining  -" not in out


def test_nvidia_smi_passed_as_the_log_is_recognized(capsys, monkeypatch, files):
    code, out, err = _run(["logs", files[1]], capsys, monkeypatch)
    assert code == 2
    assert err == (f"vram-detective: error: {files[1]} is nvidia-smi output, not an engine log: pass it with "
                   f"--nvidia-smi (vram-detective logs ENGINE_LOG --nvidia-smi {files[1]})\n")


@pytest.mark.parametrize("args", [["models", "--markdown"], ["gpus", "--markdown"], ["compare", "Qwen/Qwen3-8B",
                                  "--gpu", "4090", "--markdown"], ["whatif", "Qwen/Qwen3-8B", "--gpu", "H100",
                                  "--markdown"], ["fit", "Qwen/Qwen3-8B", "--gpu", "H100", "--markdown"]])
def test_markdown_everywhere(args, capsys, monkeypatch):
    _, out, _ = _run(args, capsys, monkeypatch, 80)
    assert "|---" in out


@pytest.mark.parametrize("args", [["models", "llama", "--json"], ["gpus", "16GB", "--json"]])
def test_json_of_the_filtered_catalogs(args, capsys, monkeypatch):
    _, out, _ = _run(args, capsys, monkeypatch)
    rows = json.loads(out)
    assert rows


def test_models_filter_and_header(capsys, monkeypatch):
    _, out, _ = _run(["models", "llama"], capsys, monkeypatch, 120)
    lines = out.splitlines()
    assert lines[0].split() == ["model", "layers", "hidden", "precision", "·", "architecture"]
    assert "meta-llama/Llama-3.1-8B-Instruct" in out and "Qwen/Qwen3-8B " not in out
    assert lines[-1].endswith("matching 'llama', " + lines[-1].split(", ")[-1])


def test_gpus_filter_by_size(capsys, monkeypatch):
    _, out, _ = _run(["gpus", "16GB"], capsys, monkeypatch, 120)
    names = [line.split("  ")[0] for line in out.splitlines()[1:] if line and not line.startswith(" ")]
    assert {"RTX 4060 Ti 16GB", "RTX 4080", "RTX 4080 SUPER", "RTX A4000", "RTX 5080"} <= set(names)
    assert "H100 SXM" not in names and "RTX 4090" not in names
    assert out.splitlines()[0].split()[:3] == ["GPU", "CUDA", "total"]


def test_rtx_4060_is_cataloged_and_says_its_total_is_derived(capsys, monkeypatch):
    _, out, _ = _run(["gpus", "4060", "--verbose"], capsys, monkeypatch, 200)
    assert "RTX 4060 " in out and "7.57 GiB" in out and "cuda total derived (no Linux reading yet)" in out


def test_gpu_memory_says_how_it_was_read(capsys, monkeypatch):
    _, out, _ = _run(["explain", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu-memory", "16GB"], capsys, monkeypatch, 120)
    assert "note: --gpu-memory 16GB read as 14.90 GiB (16,000,000,000 bytes) as CUDA reports it" in out


def test_ambiguous_gpu_says_which_it_took(capsys, monkeypatch):
    _, out, _ = _run(["explain", "Qwen/Qwen3-8B", "--gpu", "A100"], capsys, monkeypatch, 200)
    assert ("note: 'A100' is several cards: took the A100 80GB (NVIDIA A100-SXM4-80GB, 79.25 GiB); for another "
            'pass --gpu "A100 40GB" or --gpu "A100 40GB PCIe"') in out


def test_unknown_gpu_hint_borrows_no_size(capsys, monkeypatch):
    code, _, err = _run(["explain", "Qwen/Qwen3-8B", "--gpu", "RTX 4065"], capsys, monkeypatch)
    assert code == 2 and "did you mean" in err
    assert "--gpu-memory 1" not in err and "torch.cuda.mem_get_info()[1]" in err


def test_release_out_of_range_and_release_line(capsys, monkeypatch):
    code, _, err = _run(["explain", "Qwen/Qwen3-8B", "--gpu", "H100", "--vllm-version", "0.99"], capsys, monkeypatch)
    assert code == 2
    # the message names the modelled window, whichever release is the newest
    assert re.fullmatch(r"vram-detective: error: vLLM 0\.99 is newer than the newest modelled release "
                        r"\(known releases: 0\.3\.0 to 0\.\d+\.x\)\n", err), err
    code, out, _ = _run(["explain", "Qwen/Qwen3-8B", "--gpu", "H100", "--vllm-version", "0.6"], capsys, monkeypatch, 120)
    assert out.startswith("Starts on vLLM 0.6.6 (V0 engine)")
    assert "note: --engine-version 0.6 read as 0.6.6, the newest 0.6.x release it knows" in out


def test_whatif_on_a_model_that_does_not_start(capsys, monkeypatch):
    code, out, _ = _run(COMMANDS["whatif-refused"], capsys, monkeypatch, 120)
    flat = " ".join(out.split())
    assert code == 1
    assert out.startswith("vLLM would refuse to start as it is: CUDA out of memory while loading the weights")
    assert 'try: vram-detective fit Qwen/Qwen3-8B --gpu "Tesla T4" --context 40960' in flat
    assert flat.count("CUDA out of memory while loading the weights") == 1  # not once per lever
    assert ("would not start (as the baseline): gpu_memory_utilization: 0.92 -> 0.87, gpu_memory_utilization: "
            "0.92 -> 0.97, max_model_len: 40,960 -> 20,480") in flat


def test_fit_that_finds_nothing_says_why_and_what_would(capsys, monkeypatch):
    code, out, _ = _run(COMMANDS["fit-nothing"], capsys, monkeypatch, 120)
    flat = " ".join(out.split())
    assert code == 1
    assert out.startswith("No configuration meets the target.")
    assert "why not: with 1 GPU(s) the lightest checkpoint still holds 67.70 GiB of weights per GPU" in flat
    assert "more GPUs: 4 GPUs meet the target" in flat
    assert "vllm serve nvidia/Llama-3.1-70B-Instruct-FP8 --tensor-parallel-size 4" in flat


def test_score_markdown(capsys, monkeypatch):
    code, out, _ = _run(["score", "--markdown"], capsys, monkeypatch)
    assert code == 0 and out.startswith("```\n") and out.rstrip().endswith("```")


def test_pasted_line_lists_ignored_flags_and_refuses_a_misspelt_one(capsys, monkeypatch):
    _, out, _ = _run(["explain", "--gpu", "4090", "--", "vllm", "serve", "Qwen/Qwen3-8B", "--port", "8000",
                      "--max-model-len", "8k", "--compilation-config", "{}"], capsys, monkeypatch, 120)
    assert "note: ignored (no effect on memory, or not modelled): --port, --compilation-config" in out
    code, out, err = _run(["explain", "--gpu", "4090", "--", "vllm", "serve", "Qwen/Qwen3-8B", "--port", "8000",
                           "--gpu-memory-utilisation", "0.8"], capsys, monkeypatch, 120)
    assert (code, out) == (2, "")
    assert err == ("vram-detective: error: unknown flag in the launch line: --gpu-memory-utilisation (did you mean "
                   "--gpu-memory-utilization?); vLLM would exit at once on it\n")


@pytest.mark.parametrize("line, typo, meant, label", [
    ("python -m sglang.launch_server --model-path Qwen/Qwen3-8B --mem-fraction-statik 0.85 --foo-bar 3",
     "--mem-fraction-statik", "--mem-fraction-static", "SGLang"),
    ("llama-server -m Qwen/Qwen3-8B --ctx-sizee 4096 --port 8080", "--ctx-sizee", "--ctx-size", "llama.cpp"),
    ("vllm serve Qwen/Qwen3-8B --max-model-lenn 8192", "--max-model-lenn", "--max-model-len", "vLLM"),
])
def test_a_misspelt_flag_in_any_engines_line_is_bad_input(capsys, monkeypatch, line, typo, meant, label):
    """The engine itself exits at once on a flag it does not have: so does the prediction (exit 2), naming the
    flag meant; a flag far from any (--foo-bar, --port) is listed as ignored."""
    code, out, err = _run(["explain", "--gpu", "4090", "--", *line.split()], capsys, monkeypatch, 80)
    assert (code, out) == (2, "")
    assert err.startswith(f"vram-detective: error: unknown flag in the launch line: {typo} (did you mean {meant}?); "
                          f"{label} would exit at once on it")
    fixed = line.replace(typo, meant)
    code, out, _ = _run(["explain", "--gpu", "4090", "--", *fixed.split()], capsys, monkeypatch, 80)
    assert code == 0 and out.startswith(f"Starts on {label}")
    assert "note: ignored (no effect on memory, or not modelled): " + ("--foo-bar" if "foo" in line else "--port") \
        in " ".join(out.split()) or "--port" not in fixed


def test_docker_run_line_takes_the_release_from_the_image_tag(capsys, monkeypatch):
    _, out, _ = _run(["explain", "--gpu", "4090", "--", "docker", "run", "--gpus", "all", "-p", "8000:8000",
                      "--ipc=host", "vllm/vllm-openai:v0.6.3", "--model", "Qwen/Qwen2.5-7B-Instruct-AWQ",
                      "--max-model-len", "32k"], capsys, monkeypatch, 120)
    assert out.startswith(_seed_first_line())
    assert "note: release 0.6.3 from the image tag" in out


def test_a_single_quoted_launch_line(capsys, monkeypatch):
    _, out, _ = _run(["explain", "--gpu", "4090", "--vllm-version", "0.6.3", "--",
                      "vllm serve Qwen/Qwen2.5-7B-Instruct-AWQ --max-model-len 32k"], capsys, monkeypatch, 120)
    assert out.startswith(_seed_first_line())
    assert "max_model_len=32768" in out


def test_compare_shows_a_refused_engine_as_refused():
    # vLLM 0.33.0's pool holds 32,736 tokens for a 32,768-token request on a 4090: it refuses (its own check); the
    # column must not read as a start (no nvidia-smi figure, concurrency under one request) and the reason is printed
    # under the table, not as one long stderr line
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "src"), NO_COLOR="1", COLUMNS="80")
    result = subprocess.run([sys.executable, "-m", "vram_detective", "compare", "Qwen/Qwen3-8B", "--gpu", "4090",
                             "--context", "32k", "--version", "vllm=0.33.0", "--version", "sglang=0.5.23"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    starts = next(line for line in lines if line.startswith("│ starts"))
    assert starts.split("│")[2].strip() == "no: refuses" and starts.split("│")[3].strip() == "yes"
    used = next(line for line in lines if line.startswith("│ nvidia-smi used"))
    assert used.split("│")[2].strip() == "- (refuses)"
    concurrency = next(line for line in lines if line.startswith("│ concurrency"))
    assert concurrency.split("│")[2].strip() == "0.99x at 32,768"
    assert any(line.startswith("  vLLM 0.33.0 would refuse to start: To serve at least one request") for line in lines)
    assert max(len(line) for line in lines) <= 80
