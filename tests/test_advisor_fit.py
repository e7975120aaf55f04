"""`vram-detective fit`: targets met or not, the ranking's guarantees, the exactness of the inverse over
gpu_memory_utilization, the launch line round-tripping through `explain -- <line>`, JSON, exit codes."""
from __future__ import annotations

import io
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import GIB
from vram_detective import api
from vram_detective.advisor.command import Progress
from vram_detective.engines.vllm.advisor.launch_command import python_command, serve_command
from vram_detective.engines.vllm.advisor.search import Target, fit
from vram_detective.cli import main

SRC = Path(__file__).resolve().parents[1] / "src"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(SRC), NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "vram_detective", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def fit_json(capsys, *args: str, code: int = 0) -> dict:
    returned = main(["fit", *args, "--json"])
    captured = capsys.readouterr()
    assert returned == code, captured.err
    return json.loads(captured.out)


def explain_line(capsys, gpu: str, version: str, command: str, *extra: str) -> dict:
    returned = main(["explain", "--gpu", gpu, "--vllm-version", version, *extra, "--json", "--", *shlex.split(command)])
    out = capsys.readouterr().out
    data = json.loads(out)
    assert returned == (1 if data["startup_failed"] else 0)
    return data


FIGURES = ("weights_gib", "kv_cache_gib", "kv_cache_tokens", "max_concurrency", "max_model_len",
           "nvidia_smi_used_mib", "startup_failed", "vllm")  # "vllm": its own figures, nested (schema 2)
VLLM_FIGURES = ("num_gpu_blocks", "activation_peak_gib", "cuda_graph_gib", "budget_gib")


# --- the examples ---------------------------------------------------------------------------------


def test_ceiling_on_a_4090(capsys):
    data = fit_json(capsys, "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090", "--max-gpu-memory", "12GiB")
    assert data["feasible"] and data["target"]["max_gpu_memory_mib"] == 12288
    best = data["candidates"][0]
    assert best["model"] == "Qwen/Qwen2.5-7B-Instruct-AWQ"  # the checkpoint asked for comes first
    assert best["nvidia_smi_used_mib"] <= 12288 and not best["startup_failed"] and best["verified"]
    assert best["binding_constraint"] and best["binding_reason"]
    for candidate in data["candidates"]:
        assert candidate["nvidia_smi_used_mib"] <= 12288
        assert set(candidate) >= {"settings", "command", "binding_constraint", *FIGURES}
        assert set(candidate["vllm"]) >= set(VLLM_FIGURES)
    # a hundredth more utilization would cross the ceiling (or the model's whole context already fits below it)
    settings = dict(best["settings"], gpu_memory_utilization=round(best["settings"]["gpu_memory_utilization"] + 0.01, 2))
    higher = api.explain(best["model"], "RTX 4090", **settings)
    assert higher.nvidia_smi_used_mib > 12288


def test_seventy_b_on_one_h100_is_infeasible(capsys):
    data = fit_json(capsys, "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "H100", "--context", "32k",
                    "--concurrency", "16", code=1)
    assert not data["feasible"] and data["candidates"] == []
    relaxed = {item["relaxed"]: item for item in data["nearest"]}
    assert relaxed["concurrency"]["candidate"]["max_concurrency"] < 16
    assert relaxed["concurrency"]["candidate"]["binding_constraint"] == "KV pool"
    assert relaxed["context"]["candidate"]["max_model_len"] < 32768
    assert relaxed["context"]["candidate"]["max_concurrency"] >= 16
    gpus = relaxed["gpus"]["candidate"]
    assert gpus["max_concurrency"] >= 16 and gpus["settings"]["tensor_parallel_size"] * gpus["settings"][
        "pipeline_parallel_size"] > 1


def test_context_beyond_the_model(capsys):
    returned = main(["fit", "Qwen/Qwen3-32B", "--gpu", "RTX 4090", "--gpus", "2", "--context", "128k"])
    out = capsys.readouterr().out
    assert returned == 1
    assert "exceed the model's max_model_len (40,960)" in out
    assert "the longest context at 1 concurrent request(s) is 40,960 tokens" in out


def test_target_met_with_graphs_and_full_precision_first(capsys):
    data = fit_json(capsys, "Qwen/Qwen3-8B", "--gpu", "H100", "--context", "32k", "--concurrency", "10", "--top", "12")
    best = data["candidates"][0]
    assert best["model"] == "Qwen/Qwen3-8B" and best["settings"].get("kv_cache_dtype", "auto") == "auto"
    assert not best["settings"]["enforce_eager"] and best["compromises"] == []
    assert best["max_concurrency"] >= 10 and best["max_model_len"] == 32768
    assert best["command"] == "vllm serve Qwen/Qwen3-8B --max-model-len 32768"
    # a candidate with a compromise never ranks before one without it
    plain = [not c["compromises"] for c in data["candidates"]]
    assert plain == sorted(plain, reverse=True)
    # 20 at once needs an fp8 KV cache (or another checkpoint) on one H100
    more = fit_json(capsys, "Qwen/Qwen3-8B", "--gpu", "H100", "--context", "32k", "--concurrency", "20")
    assert more["candidates"][0]["settings"]["kv_cache_dtype"] == "fp8"


# --- exactness --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model,gpu,version,context", [
    ("Qwen/Qwen3-8B", "RTX 4090", None, 8192),
    ("google/gemma-3-1b-it", "RTX 4090", "0.11.0", 32768),
    ("meta-llama/Llama-3.1-8B-Instruct", "A100-80G", "0.6.4", 16384),
])
def test_smallest_utilization_is_exact(model, gpu, version, context):
    """Pinned batch settings, a concurrency just beyond the default utilization: the fit's utilization meets
    the target in api.explain, one hundredth less does not."""
    pins = {"max_num_seqs": 64, "max_num_batched_tokens": 16384, "kv_cache_dtype": "auto", "enforce_eager": False}
    base = api.explain(model, gpu, vllm_version=version, max_model_len=context, **pins)
    need = base.max_concurrency * 1.05
    result = fit(model, gpu, Target(context=context, concurrency=need), vllm_version=version, pins=pins,
                 same_checkpoint=True)
    assert result.feasible
    best = result.candidates[0]
    u = best.point[0]
    assert u > float(base.setting("gpu_memory_utilization"))
    met = api.explain(model, gpu, vllm_version=version, **best.settings)
    assert met.failure is None and met.max_concurrency >= need and best.verified
    below = api.explain(model, gpu, vllm_version=version, **dict(best.settings, gpu_memory_utilization=round(u - 0.01, 2)))
    assert below.max_concurrency < need or below.failure is not None


def test_largest_context_is_exact():
    result = fit("Qwen/Qwen2.5-7B-Instruct", "RTX 4090", Target(concurrency=8), same_checkpoint=True,
                 pins={"kv_cache_dtype": "auto", "enforce_eager": False})
    best = result.candidates[0]
    length = best.point[1]
    assert best.binding in ("KV pool", "startup check") and length < 32768
    met = api.explain(best.model, "RTX 4090", **best.settings)
    assert met.failure is None and met.max_concurrency >= 8
    longer = api.explain(best.model, "RTX 4090", **dict(best.settings, max_model_len=length + 1))
    assert longer.failure is not None or longer.max_concurrency < 8


def test_more_memory_never_lowers_what_fits():
    previous = None
    for ceiling in (10, 12, 14, 16, 20, 23):
        result = fit("Qwen/Qwen3-8B", "RTX 4090", Target(context=8192, max_gpu_memory=ceiling * GIB),
                     same_checkpoint=True, pins={"kv_cache_dtype": "auto", "enforce_eager": False,
                                                 "max_num_seqs": 64, "max_num_batched_tokens": 4096})
        concurrency = result.candidates[0].concurrency if result.feasible else 0.0
        if previous is not None:
            assert concurrency >= previous
        previous = concurrency
    assert previous > 0


# --- the launch line --------------------------------------------------------------------------------------


@pytest.mark.parametrize("args,gpu,version", [
    (("Qwen/Qwen2.5-7B-Instruct-AWQ", "--max-gpu-memory", "12GiB"), "RTX 4090", "0.33.0"),
    (("Qwen/Qwen3-8B", "--context", "16k", "--concurrency", "8", "--entrypoint", "llm"), "L4", "0.33.0"),
    (("meta-llama/Llama-3.1-8B-Instruct", "--context", "20000", "--concurrency", "2"), "RTX 3090", "0.6.4"),
    (("Qwen/Qwen3-32B", "--context", "16k", "--gpus", "2"), "RTX 4090", "0.19.0"),
    (("openai/gpt-oss-20b", "--context", "64k", "--concurrency", "4"), "H100", "0.11.0"),
])
def test_command_round_trips_through_explain(capsys, args, gpu, version):
    data = fit_json(capsys, *args, "--gpu", gpu, "--vllm-version", version, "--top", "3")
    assert data["feasible"]
    for candidate in data["candidates"]:
        again = explain_line(capsys, gpu, version, candidate["command"])
        assert {key: again[key] for key in FIGURES} == {key: candidate[key] for key in FIGURES}, candidate["command"]
        # the Python form carries the same settings (its own defaults are the LLM class's)
        assert candidate["python"].startswith("from vllm import LLM\nllm = LLM(model=")


def test_launch_lines():
    settings = {"tensor_parallel_size": 2, "gpu_memory_utilization": 0.87, "max_model_len": 32768,
                "kv_cache_dtype": "fp8", "enforce_eager": True, "cpu_offload_gb": 2.5}
    assert serve_command("org/My Model", settings) == (
        "vllm serve 'org/My Model' --tensor-parallel-size 2 --gpu-memory-utilization 0.87 --max-model-len 32768 "
        "--kv-cache-dtype fp8 --enforce-eager --cpu-offload-gb 2.5")
    assert serve_command("m", {"max_num_seqs": 8}, engine_env="VLLM_USE_V1=0") == "VLLM_USE_V1=0 vllm serve m --max-num-seqs 8"
    assert python_command("m", settings) == (
        "from vllm import LLM\nllm = LLM(model='m', tensor_parallel_size=2, gpu_memory_utilization=0.87, "
        "max_model_len=32768, kv_cache_dtype='fp8', enforce_eager=True, cpu_offload_gb=2.5)")


# --- output, exit codes, progress ---------------------------------------------------------------------------


def test_text_output(capsys):
    returned = main(["fit", "Qwen/Qwen3-8B", "--gpu", "RTX 4090", "--context", "8k", "--concurrency", "4"])
    out = capsys.readouterr().out
    assert returned == 0
    assert "binding constraint" in out and out.startswith("Best: Qwen/Qwen3-8B") and "\n  vllm serve Qwen/Qwen3-8B" in out


def test_bad_input_is_one_line(capsys):
    result = run_cli("fit", "Qwen/Qwen3-8B", "--gpu", "4090", "--context", "lots")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("vram-detective: error: ")
    for args in (("fit", "Qwen/Qwen3-8B"), ("fit", "nobody/no-such-model", "--gpu", "4090", "--source", "catalog"),
                 ("fit", "Qwen/Qwen3-8B", "--gpu", "4090", "--max-gpu-memory", "much"),
                 ("fit", "Qwen/Qwen3-8B", "--gpu", "4090", "--gpus", "0"),
                 ("whatif", "Qwen/Qwen3-8B", "--gpu", "Voodoo 3"), ("whatif", "Qwen/Qwen3-8B")):
        assert main(list(args)) == 2, args
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and err.startswith("vram-detective: error: "), (args, err)


def test_infeasible_exit_code(capsys):
    assert main(["fit", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "RTX 4090", "--context", "8k",
                 "--max-gpu-memory", "8GiB", "--same-checkpoint"]) == 1
    out = capsys.readouterr().out
    assert "No configuration meets the target." in out and "- why not: with 1 GPU(s)" in out


def test_cli_start_stays_light():
    code = ("import sys, vram_detective.cli as c; c.build_parser(); "
            "print(any(m in sys.modules for m in ('numpy', 'vram_detective.engines.vllm.sweep', 'vram_detective.api')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(SRC)), timeout=60)
    assert result.stdout.strip() == "False", result.stderr


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_progress_bar_only_on_a_terminal_and_after_a_moment():
    quiet = _Stream(tty=False)
    bar = Progress(quiet, delay=0.0)
    bar(1, 4, 0.0, "fit")
    assert quiet.getvalue() == ""
    loud = _Stream(tty=True)
    bar = Progress(loud, delay=0.0)
    bar(2, 4, 0.0, "fit")
    assert "fit [" in loud.getvalue() and "2/4 families" in loud.getvalue()
    bar(4, 4, 0.0, "fit")
    assert loud.getvalue().endswith("\r\033[K")
    import time

    patient = _Stream(tty=True)
    Progress(patient, delay=10.0)(1, 4, time.perf_counter(), "fit")
    assert patient.getvalue() == ""


def test_numpy_missing_falls_back_with_a_note(monkeypatch, capsys):
    from vram_detective.engines.vllm import sweep

    monkeypatch.setattr(sweep, "numpy_or_none", lambda: None)
    returned = main(["fit", "Qwen/Qwen3-0.6B", "--gpu", "RTX 4090", "--context", "4k", "--concurrency", "2",
                     "--same-checkpoint", "--kv-cache-dtype", "auto", "--max-num-seqs", "64", "--json"])
    captured = capsys.readouterr()
    assert returned == 0
    assert len(captured.err.splitlines()) == 1 and "numpy is not installed" in captured.err
    data = json.loads(captured.out)
    assert data["feasible"] and not data["vectorized"]
    monkeypatch.undo()
    again = fit_json(capsys, "Qwen/Qwen3-0.6B", "--gpu", "RTX 4090", "--context", "4k", "--concurrency", "2",
                     "--same-checkpoint", "--kv-cache-dtype", "auto", "--max-num-seqs", "64")
    assert [c["command"] for c in again["candidates"]] == [c["command"] for c in data["candidates"]]


def test_binding_constraints():
    from vram_detective.engines.vllm.advisor.search import Candidate, Family, _binding
    from vram_detective.engines.vllm.sweep import FastPath
    from vram_detective.advisor.variants import Variant
    from vram_detective.hardware import custom_gpu

    family = Family(Variant("Qwen/Qwen3-8B", "bf16", 16, given=True), 1, 1, "auto", False)

    def binding(fast, point, target):
        candidate = Candidate(family, fast, point, fast.figures(*point), True, 0, 0, {})
        return _binding(candidate, target)[0]

    fast = FastPath("Qwen/Qwen3-8B", "RTX 4090")
    assert binding(fast, (0.5, 8192, 64, 2048), Target(context=8192)) == "weights"  # 15 GiB > 0.5 x 23.65
    assert binding(fast, (0.92, 8192, 4, 2048), Target(context=8192, concurrency=4)) == "max_num_seqs"
    assert binding(fast, (0.92, 8192, 256, 2048), Target(context=8192, concurrency=4)) == "KV pool"
    assert binding(fast, (0.92, 16384, 256, 2048), Target(context=16384, concurrency=40)) == "KV pool"
    assert binding(fast, (0.92, 32768, 256, 2048), Target(context=32768)) == "startup check"
    big = FastPath("Qwen/Qwen3-8B", "H100")
    assert binding(big, (0.92, 40960, 256, 2048), Target(concurrency=1)) == "model context limit"
    # the longest context of one request on a smaller card: the startup check binds
    small = FastPath("Qwen/Qwen3-8B", custom_gpu(int(17.5 * GIB), compute_capability=(8, 9)))
    result = fit("Qwen/Qwen3-8B", small.gpu, Target(), same_checkpoint=True,
                 pins={"kv_cache_dtype": "auto", "enforce_eager": False})
    assert result.candidates[0].binding == "startup check"
    # a peak that alone is more than the KV cache still missing: the activation peak binds
    heavy, light = (1024, 16384), (1, 256)
    for u in [round(0.70 + 0.005 * k, 3) for k in range(50)]:
        if not small.figures(u, 8192, *heavy)["starts"] and small.figures(u, 8192, *light)["starts"]:
            assert binding(small, (u, 8192, *heavy), Target(context=8192)) == "activation peak"
            break
    else:
        raise AssertionError("no utilization where only the peak stops the start")
