"""--emit compose|k8s|helm-values|command: the files pass the published schemas (Kubernetes 1.36 strict, the
Compose Specification; tests/data/schemas, written by scripts/bundle_deploy_schemas.py from the PyPI packages that
ship them) and their command lines read back through `explain` to the same figures."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource

from vram_detective.cli import main

SCHEMAS = Path(__file__).resolve().parent / "data" / "schemas"
FIGURES = ("weights_gib", "kv_cache_gib", "kv_cache_tokens", "max_concurrency", "nvidia_smi_used_mib", "max_model_len")


def _schema(name: str) -> dict:
    return json.loads((SCHEMAS / name).read_text())


def _k8s_validator(kind_file: str):
    definitions = _schema("k8s-1.36-_definitions.json")
    registry = Registry().with_resource("https://kubernetes.io/api/_definitions.json",
                                        Resource.from_contents(definitions))
    return jsonschema.Draft202012Validator(_schema(kind_file), registry=registry)


def _run(argv, capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _explain_json(argv, capsys) -> dict:
    code, out, err = _run(["explain", *argv, "--json"], capsys)
    assert code == 0, err
    return json.loads(out)


def _same_figures(a: dict, b: dict) -> None:
    assert {key: a.get(key) for key in FIGURES} == {key: b.get(key) for key in FIGURES}
    assert a["engine_version"] == b["engine_version"]


CASES = [  # (engine arguments before --emit, the GPU)
    (["Qwen/Qwen3-8B", "--max-model-len", "16384", "--gpu-memory-utilization", "0.85", "-tp", "2",
      "--enable-prefix-caching"], "H100"),
    (["Qwen/Qwen3-8B", "--engine", "sglang", "--mem-fraction-static", "0.8", "--context-length", "16384",
      "--max-running-requests", "64"], "RTX 4090"),
    (["meta-llama/Llama-3.1-8B-Instruct", "--engine-version", "0.6.3", "--max-model-len", "8192", "--enforce-eager"],
     "A100"),
]


@pytest.mark.parametrize("argv, gpu", CASES)
def test_k8s_passes_the_kubernetes_schema_and_round_trips(argv, gpu, capsys):
    code, out, err = _run(["explain", *argv, "--gpu", gpu, "--emit", "k8s"], capsys)
    assert code == 0, err
    deployment, service = yaml.safe_load_all(out)
    _k8s_validator("k8s-1.36-deployment-apps-v1.json").validate(deployment)
    _k8s_validator("k8s-1.36-service-v1.json").validate(service)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert service["spec"]["ports"][0]["targetPort"] == container["ports"][0]["containerPort"]
    before = _explain_json([*argv, "--gpu", gpu], capsys)
    assert container["image"].endswith(f":v{before['engine_version']}")
    gpus = container["resources"]["limits"]["nvidia.com/gpu"]
    assert gpus == (2 if "-tp" in argv else 1)
    after = _explain_json(["--gpu", gpu, "--engine-version", before["engine_version"], "--", *container["command"]],
                          capsys)
    _same_figures(before, after)


def test_the_strict_schema_refuses_a_broken_deployment(capsys):
    """The validator is real: a field Kubernetes does not know, or a wrong type, is refused."""
    _, out, _ = _run(["explain", "Qwen/Qwen3-8B", "--gpu", "H100", "--emit", "k8s"], capsys)
    deployment, _ = yaml.safe_load_all(out)
    validator = _k8s_validator("k8s-1.36-deployment-apps-v1.json")
    assert validator.is_valid(deployment)
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"] = [8000]
    assert not validator.is_valid(deployment)
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"] = 8000
    assert validator.is_valid(deployment)
    deployment["spec"]["replicaz"] = 1
    assert not validator.is_valid(deployment)


@pytest.mark.parametrize("argv, gpu", CASES[:2])
def test_compose_passes_the_compose_specification_and_round_trips(argv, gpu, capsys):
    code, out, err = _run(["explain", *argv, "--gpu", gpu, "--emit", "compose"], capsys)
    assert code == 0, err
    document = yaml.safe_load(out)
    jsonschema.Draft7Validator(_schema("compose-spec.json")).validate(document)
    (service,) = document["services"].values()
    assert service["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    before = _explain_json([*argv, "--gpu", gpu], capsys)
    after = _explain_json(["--gpu", gpu, "--", *service["entrypoint"]], capsys)
    _same_figures(before, after)


def test_fit_emit_k8s_is_the_best_candidate(capsys):
    argv = ["fit", "Qwen/Qwen3-8B", "--gpu", "RTX 4090", "--context", "16k", "--concurrency", "4"]
    code, out, err = _run([*argv, "--json"], capsys)
    assert code == 0, err
    best = json.loads(out)["candidates"][0]
    code, out, err = _run([*argv, "--emit", "k8s"], capsys)
    assert code == 0, err
    deployment, service = yaml.safe_load_all(out)
    _k8s_validator("k8s-1.36-deployment-apps-v1.json").validate(deployment)
    _k8s_validator("k8s-1.36-service-v1.json").validate(service)
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    after = _explain_json(["--gpu", "RTX 4090", "--", *command], capsys)
    assert after["kv_cache_tokens"] == best["kv_cache_tokens"] and after["max_model_len"] == 16384
    assert after["max_concurrency"] >= 4


def test_fit_emit_compose_for_llamacpp_round_trips_the_flags(capsys):
    argv = ["fit", "Qwen/Qwen3-8B", "--engine", "llamacpp", "--gguf-type", "Q4_K_M", "--gpu", "RTX 4090",
            "--context", "16k"]
    code, out, err = _run([*argv, "--emit", "compose"], capsys)
    assert code == 0, err
    document = yaml.safe_load(out)
    jsonschema.Draft7Validator(_schema("compose-spec.json")).validate(document)
    (service,) = document["services"].values()
    assert service["image"] == "ghcr.io/ggml-org/llama.cpp:server-cuda-b11312"  # the newest modelled build
    assert service["volumes"] == ["./models:/models:ro"]
    words = service["entrypoint"]
    model_at = words.index("-m")
    assert words[model_at + 1] == "/models/Qwen3-8B-Q4_K_M.gguf"
    flags = ["llama-server", *words[1:model_at], *words[model_at + 2:]]  # the file is the model given below
    after = _explain_json(["Qwen/Qwen3-8B", "--engine", "llamacpp", "--gguf-type", "Q4_K_M", "--gpu", "RTX 4090",
                           "--", *flags], capsys)
    code, out, _ = _run([*argv, "--json"], capsys)
    first = json.loads(out)["answers"][0]
    assert round(after["nvidia_smi_used_mib"]) == pytest.approx(first["vram_per_gpu_mib"]["CUDA0"], abs=1)


def test_ollama_environment_round_trips_and_helm_values(capsys):
    argv = ["Qwen/Qwen3-8B", "--engine", "ollama", "--gpu", "RTX 4090", "--num-ctx", "8192", "--kv-cache-type", "q8_0",
            "--flash-attention", "1", "--num-parallel", "2"]
    code, out, err = _run(["explain", *argv, "--emit", "compose"], capsys)
    assert code == 0, err
    document = yaml.safe_load(out)
    jsonschema.Draft7Validator(_schema("compose-spec.json")).validate(document)
    (service,) = document["services"].values()
    env = service["environment"]
    assert env == {"OLLAMA_NUM_PARALLEL": "2", "OLLAMA_FLASH_ATTENTION": "1", "OLLAMA_KV_CACHE_TYPE": "q8_0",
                   "OLLAMA_CONTEXT_LENGTH": "8192"}
    assert service["healthcheck"]["test"][1].startswith("curl -fsS http://localhost:11434/ ")
    before = _explain_json(argv, capsys)
    after = _explain_json(["Qwen/Qwen3-8B", "--engine", "ollama", "--gpu", "RTX 4090", "--",
                           *[f"{key}={value}" for key, value in env.items()], "ollama", "run", "Qwen/Qwen3-8B"], capsys)
    _same_figures(before, after)
    code, out, _ = _run(["explain", *argv, "--emit", "helm-values"], capsys)
    values = yaml.safe_load(out)
    assert values["ollama"]["gpu"] == {"enabled": True, "type": "nvidia", "number": 1}
    assert {item["name"]: item["value"] for item in values["extraEnv"]} == env


def test_vllm_helm_values_carry_the_exact_flags(capsys):
    argv = ["Qwen/Qwen3-8B", "--gpu", "H100", "--max-model-len", "16384", "--max-num-seqs", "32"]
    code, out, _ = _run(["explain", *argv, "--emit", "helm-values"], capsys)
    (spec,) = yaml.safe_load(out)["servingEngineSpec"]["modelSpec"]
    before = _explain_json(argv, capsys)
    assert spec["tag"] == f"v{before['engine_version']}" and spec["requestGPU"] == 1
    after = _explain_json(["--gpu", "H100", "--", "vllm", "serve", spec["modelURL"], *spec["vllmConfig"]["extraArgs"]],
                          capsys)
    _same_figures(before, after)


def test_no_chart_no_gpu_and_refusal_are_plain(capsys):
    code, out, err = _run(["explain", "Qwen/Qwen3-8B", "--engine", "sglang", "--gpu", "H100", "--emit", "helm-values"],
                          capsys)
    assert code == 2 and not out and "SGLang has no common Helm chart" in err and err.count("\n") == 1
    code, out, err = _run(["explain", "Qwen/Qwen3-8B", "--emit", "k8s"], capsys)
    assert code == 2 and "--emit needs a GPU" in err
    code, out, err = _run(["explain", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "RTX 4090", "--emit", "k8s"],
                          capsys)
    assert code == 1 and not out and "would refuse to start" in err


def test_amd_gpus_are_requested_as_amd(capsys):
    code, out, err = _run(["explain", "Qwen/Qwen3-8B", "--gpu", "MI300X", "--emit", "k8s"], capsys)
    assert code == 0, err
    deployment, _ = yaml.safe_load_all(out)
    _k8s_validator("k8s-1.36-deployment-apps-v1.json").validate(deployment)
    assert deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {"amd.com/gpu": 1}


def test_command_reads_back_as_a_launch_line(capsys):
    code, out, _ = _run(["explain", "Qwen/Qwen3-8B", "--engine", "sglang", "--gpu", "H100", "--mem-fraction-static",
                         "0.75", "--emit", "command"], capsys)
    line = [text for text in out.splitlines() if not text.startswith("#")][0]
    assert line.startswith("python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --host 0.0.0.0 --port 30000")
    before = _explain_json(["Qwen/Qwen3-8B", "--engine", "sglang", "--gpu", "H100", "--mem-fraction-static", "0.75"],
                           capsys)
    _same_figures(before, _explain_json(["--gpu", "H100", "--", *shlex.split(line)], capsys))


def test_library_deployment_is_the_cli_file(capsys):
    from vram_detective.deploy import deployment

    text = deployment("Qwen/Qwen3-8B", "H100", "compose", max_model_len=16384, tensor_parallel_size=2)
    _, out, _ = _run(["explain", "Qwen/Qwen3-8B", "--gpu", "H100", "--max-model-len", "16384", "-tp", "2",
                      "--emit", "compose"], capsys)
    assert text == out
    with pytest.raises(ValueError, match="no common Helm chart"):
        deployment("Qwen/Qwen3-8B", "H100", "helm-values", engine="sglang")
