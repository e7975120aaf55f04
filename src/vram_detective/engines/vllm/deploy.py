"""vLLM as a server in a container: the vllm/vllm-openai image at the release, `/health` (and `/metrics`) on port
8000 (vllm/entrypoints/openai/api_server.py: @router.get("/health"), 0.3-0.9; serve/instrumentator/health.py in
0.19), and the OpenAI server module every release ships (vllm.entrypoints.openai.api_server, `__main__`)."""
from __future__ import annotations

from ..deployment import Deployment, flag_words

PORT = 8000
# vLLM's own settings that are not server flags: the entrypoint is `serve` in a server; the V0/V1 path is a variable
_NOT_FLAGS = ("entrypoint", "engine")
_FALSE_FLAGS = {"enable_prefix_caching": "--no-enable-prefix-caching",
                "enable_chunked_prefill": "--no-enable-chunked-prefill"}


def _image(release: str) -> str:
    return f"vllm/vllm-openai:v{release}"  # Docker Hub tags are the release with a v (v0.10.2)


def _argv(model: str, settings: dict) -> list[str]:
    from .launch import FLAGS

    return ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--host", "0.0.0.0",
            "--port", str(PORT), *flag_words(FLAGS, settings, _NOT_FLAGS, _FALSE_FLAGS)]


def _env(settings: dict) -> dict:
    path = settings.get("engine")
    return {"VLLM_USE_V1": "1" if path == "v1" else "0"} if path in ("v0", "v1") else {}


def _gpus(settings: dict) -> int:
    return (int(settings.get("tensor_parallel_size") or 1) * int(settings.get("pipeline_parallel_size") or 1)
            * int(settings.get("data_parallel_size") or 1))


def _helm(model: str, settings: dict, release: str, gpus: int, vendor: str) -> dict:
    """vLLM production-stack's chart (vllm-project/production-stack helm/values.yaml): one modelSpec whose
    vllmConfig.extraArgs carry the exact flags."""
    from .launch import FLAGS

    flags = flag_words(FLAGS, settings, _NOT_FLAGS, _FALSE_FLAGS)
    name = "".join(c if c.isalnum() else "-" for c in model.rsplit("/", 1)[-1].lower()).strip("-")[:40] or "model"
    spec = {"name": name, "repository": "vllm/vllm-openai", "tag": f"v{release}", "modelURL": model,
            "replicaCount": 1, "requestCPU": 4, "requestMemory": "16Gi", "requestGPU": gpus,
            "vllmConfig": {"extraArgs": flags}}
    if _env(settings):
        spec["env"] = [{"name": key, "value": value} for key, value in _env(settings).items()]
    return {"servingEngineSpec": {"modelSpec": [spec]}}


DEPLOYMENT = Deployment(
    model_store="/root/.cache/huggingface", hub_token=True,
    image=_image, port=PORT, health_path="/health", metrics_path="/metrics", argv=_argv, gpus=_gpus, env=_env,
    # vLLM's Kubernetes guide mounts an in-memory emptyDir of 2Gi at /dev/shm for the workers' shared memory
    # (docs/deployment/k8s.md); its Docker guide: --ipc=host or --shm-size
    shm_bytes=2 << 30, shm_source="vLLM's Kubernetes deployment guide: emptyDir medium Memory, sizeLimit 2Gi",
    helm=_helm, helm_chart="vllm-project/production-stack (vllm-stack)", unset_settings=_NOT_FLAGS)
