"""Ollama's local model store: a name as Ollama writes it ("qwen2.5:7b-instruct-q4_K_M") -> its manifest
(manifests/<host>/<namespace>/<model>/<tag>, JSON) -> the layer with mediaType
application/vnd.ollama.image.model -> blobs/sha256-<hex>, a GGUF file (server/modelpath.go, server/images.go).
The store is OLLAMA_MODELS, else ~/.ollama/models."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ...errors import NotFound

DEFAULT_HOST, DEFAULT_NAMESPACE, DEFAULT_TAG = "registry.ollama.ai", "library", "latest"
MODEL_MEDIA = "application/vnd.ollama.image.model"
PROJECTOR_MEDIA = "application/vnd.ollama.image.projector"
PARAMS_MEDIA = "application/vnd.ollama.image.params"


class OllamaModelNotFound(NotFound):
    pass


@dataclass(frozen=True)
class OllamaModel:
    name: str  # as given
    manifest: Path
    model_blob: Path  # the GGUF
    projector_blob: Path | None  # vision projector GGUF, when the model has one
    params: dict  # the Modelfile PARAMETERs (num_ctx, num_gpu, ...) when the manifest carries them


def store_dir(models_dir: str | os.PathLike | None = None) -> Path:
    if models_dir is not None:
        return Path(models_dir).expanduser()
    env = os.environ.get("OLLAMA_MODELS")
    return Path(env).expanduser() if env else Path.home() / ".ollama" / "models"


def looks_like_ollama_name(text: str) -> bool:
    """'qwen2.5:7b', 'llama3.1', 'hf.co/user/repo:Q4_K_M': no path separators of a file, no .gguf suffix."""
    return bool(text) and not text.endswith(".gguf") and not text.startswith((".", "/", "~")) and " " not in text


def manifest_path(name: str, models_dir=None) -> Path:
    """host/namespace/model/tag as Ollama's ParseModelPath splits the name."""
    base, tag = name.rsplit(":", 1) if ":" in name.rsplit("/", 1)[-1] else (name, DEFAULT_TAG)
    parts = base.split("/")
    if len(parts) == 1:
        parts = [DEFAULT_HOST, DEFAULT_NAMESPACE, parts[0]]
    elif len(parts) == 2:
        parts = [DEFAULT_HOST, *parts]
    return store_dir(models_dir) / "manifests" / Path(*parts) / (tag or DEFAULT_TAG)


def _blob(root: Path, digest: str) -> Path:
    return root / "blobs" / digest.replace(":", "-")


def resolve(name: str, models_dir=None) -> OllamaModel:
    """The manifest and blobs of a model pulled into the local store."""
    root = store_dir(models_dir)
    path = manifest_path(name, models_dir)
    if not path.is_file():
        raise OllamaModelNotFound(f"{name}: no manifest at {path} (pulled with `ollama pull {name}`?)")
    manifest = json.loads(path.read_text())
    layers = {layer.get("mediaType"): layer for layer in manifest.get("layers", [])}
    if MODEL_MEDIA not in layers:
        raise OllamaModelNotFound(f"{name}: manifest {path} has no {MODEL_MEDIA} layer")
    model = _blob(root, layers[MODEL_MEDIA]["digest"])
    if not model.is_file():
        raise OllamaModelNotFound(f"{name}: blob {model} named by the manifest is missing")
    projector = _blob(root, layers[PROJECTOR_MEDIA]["digest"]) if PROJECTOR_MEDIA in layers else None
    params = {}
    if PARAMS_MEDIA in layers and _blob(root, layers[PARAMS_MEDIA]["digest"]).is_file():
        params = json.loads(_blob(root, layers[PARAMS_MEDIA]["digest"]).read_text())
    return OllamaModel(name, path, model, projector, params)


def load(name: str, models_dir=None):
    """(ModelSpec, CheckpointTable, OllamaModel) of a stored model: its GGUF header read like any GGUF file."""
    from ...model.config import parse_config
    from ...model.gguf_source import load_gguf

    found = resolve(name, models_dir)
    config, table = load_gguf([found.model_blob], name)
    return parse_config(config, name=name), table, found
