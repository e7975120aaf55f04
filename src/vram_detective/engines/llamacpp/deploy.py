"""llama-server in a container: the ggml-org server image built with CUDA at the build
(ghcr.io/ggml-org/llama.cpp:server-cuda-bNNNN; ROCm: server-rocm), its entrypoint /app/llama-server, `/health`
and (with --metrics) `/metrics` on the port it is given (tools/server/server.cpp: "/health", "/metrics"). The
GGUF file is mounted at /models."""
from __future__ import annotations

from ..deployment import Deployment, flag_words

PORT = 8080
_NOT_FLAGS = ("gguf_type", "device_free_mib", "num_gpus")  # the tool's own, or printed as -dev below


def _argv(model: str, settings: dict) -> list[str]:
    from .launch import FLAGS

    words = ["/app/llama-server", "-m", model, "--host", "0.0.0.0", "--port", str(PORT), "--metrics"]
    words += flag_words(FLAGS, settings, _NOT_FLAGS)
    gpus = int(settings.get("num_gpus") or 1)
    if gpus > 1 and not settings.get("tensor_split"):
        words += ["-dev", ",".join(f"CUDA{i}" for i in range(gpus))]  # -dev names the devices (common/arg.cpp)
    return words


def _gpus(settings: dict) -> int:
    return max(int(settings.get("num_gpus") or 1), len(settings.get("tensor_split") or ()))


def _notes(settings: dict) -> list[str]:
    if settings.get("gguf_type"):
        return [f"the GGUF file (the {settings['gguf_type']} mix the prediction sized) goes in the mounted models "
                "directory"]
    return []


DEPLOYMENT = Deployment(
    image=lambda release: f"ghcr.io/ggml-org/llama.cpp:server-cuda-{release}", port=PORT, health_path="/health",
    metrics_path="/metrics", argv=_argv, gpus=_gpus, model_in_file=True, notes=_notes, unset_settings=_NOT_FLAGS)
