"""Ollama in a container: the ollama/ollama image at the release, `ollama serve` on port 11434 answering `/`
with 200 ("Ollama is running", server/routes.go), the server's knobs as its environment variables
(envconfig: OLLAMA_NUM_PARALLEL, OLLAMA_FLASH_ATTENTION, OLLAMA_KV_CACHE_TYPE, OLLAMA_CONTEXT_LENGTH), the model
pulled once the server answers. Ollama has no Prometheus endpoint."""
from __future__ import annotations

from ..deployment import Deployment

PORT = 11434


def _env(settings: dict) -> dict:
    from .launch import ENVIRONMENT

    out = {}
    for variable, (setting, _) in ENVIRONMENT.items():
        value = settings.get(setting)
        if value is not None:
            out[variable] = ("1" if value else "0") if isinstance(value, bool) else str(value)
    return out


def _argv(model: str, settings: dict) -> list[str]:
    # the server, then the model pulled (and loaded) once it answers; the shell waits on the server
    return ["/bin/sh", "-c", f"ollama serve & until ollama list >/dev/null 2>&1; do sleep 1; done; "
                             f"ollama pull {model} && wait"]


def _notes(settings: dict) -> list[str]:
    per_model = [name for name in ("num_gpu", "num_batch") if settings.get(name) is not None]
    return [f"{', '.join(per_model)}: a Modelfile PARAMETER or a request option, not a server variable"] if per_model else []


def _helm(model: str, settings: dict, release: str, gpus: int, vendor: str) -> dict:
    """The otwld/ollama-helm chart's values (ollama.gpu, ollama.models.pull, extraEnv, image.tag)."""
    return {"image": {"tag": release},
            "ollama": {"gpu": {"enabled": True, "type": "amd" if vendor == "amd" else "nvidia", "number": gpus},
                       "models": {"pull": [model], "run": [model]}},
            "extraEnv": [{"name": key, "value": value} for key, value in _env(settings).items()]}


DEPLOYMENT = Deployment(
    model_store="/root/.ollama", hub_token=False,
    image=lambda release: f"ollama/ollama:{release}", port=PORT, health_path="/", metrics_path=None, argv=_argv,
    gpus=lambda settings: int(settings.get("num_gpus") or 1), env=_env, notes=_notes, helm=_helm,
    helm_chart="otwld/ollama-helm")
