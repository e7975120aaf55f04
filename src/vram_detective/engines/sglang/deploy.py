"""SGLang as a server in a container: the lmsysorg/sglang image at the release, `/health` and (with
--enable-metrics) `/metrics` on port 30000 (srt/entrypoints/http_server.py: @app.get("/health"); server_args.py:
port 30000, --enable-metrics), started as `python3 -m sglang.launch_server` (every release)."""
from __future__ import annotations

from ..deployment import Deployment, flag_words

PORT = 30000


def _argv(model: str, settings: dict) -> list[str]:
    from .launch import FLAGS

    return ["python3", "-m", "sglang.launch_server", "--model-path", model, "--host", "0.0.0.0", "--port", str(PORT),
            "--enable-metrics", *flag_words(FLAGS, settings)]


def _gpus(settings: dict) -> int:
    tp, pp, dp = (int(settings.get(key) or 1) for key in ("tp_size", "pp_size", "dp_size"))
    # DP attention splits the TP group's attention; plain --dp runs dp copies of the TP group
    return tp * pp * (1 if settings.get("enable_dp_attention") else dp)


DEPLOYMENT = Deployment(
    model_store="/root/.cache/huggingface", hub_token=True,
    image=lambda release: f"lmsysorg/sglang:v{release}", port=PORT, health_path="/health", metrics_path="/metrics",
    argv=_argv, gpus=_gpus,
    # SGLang's Docker instructions run the image with --shm-size 32g (docs/start/install.md)
    shm_bytes=32 << 30, shm_source="SGLang's Docker instructions: docker run --shm-size 32g")
