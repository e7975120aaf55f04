"""Ollama's local model store: a name as Ollama writes it ("qwen2.5:7b-instruct-q4_K_M") -> its manifest
(manifests/<host>/<namespace>/<model>/<tag>, JSON) -> the layer with mediaType
application/vnd.ollama.image.model -> blobs/sha256-<hex>, a GGUF file (server/modelpath.go, server/images.go).
The store is OLLAMA_MODELS, else ~/.ollama/models."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ...errors import BadInput, NotFound

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


# Ollama's own checks (types/model/name.go: a name is host/namespace/model:tag, each part of letters, digits,
# '_', '-' and '.', the host also ':' for a port, starting with a letter, digit or '_'; host at most 350
# characters, the others 80; server/images.go: a layer digest is sha256 and 64 hex digits, ':' or '-').
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
_HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-:]*")
DIGEST = re.compile(r"sha256[:-][0-9a-f]{64}")
PART_LIMITS = {"host": 350, "namespace": 80, "model": 80, "tag": 80}
MAX_MANIFEST_BYTES = 1 << 20  # a manifest names a handful of layers (a few KiB)
MAX_PARAMS_BYTES = 1 << 20  # a Modelfile's PARAMETERs


class OllamaStoreError(BadInput):
    """An Ollama name, store or manifest this tool cannot read (bad input, one line)."""


def store_dir(models_dir: str | os.PathLike | None = None) -> Path:
    if models_dir is not None:
        return Path(models_dir).expanduser()
    env = os.environ.get("OLLAMA_MODELS")
    if env:
        return Path(env).expanduser()
    try:
        return Path.home() / ".ollama" / "models"
    except RuntimeError:  # no HOME and no password entry: Ollama itself needs OLLAMA_MODELS here
        raise OllamaStoreError("no home directory to find the Ollama store in: set OLLAMA_MODELS to the store "
                               "(the directory with manifests/ and blobs/)") from None


def looks_like_ollama_name(text: str) -> bool:
    """'qwen2.5:7b', 'llama3.1', 'hf.co/user/repo:Q4_K_M': no path separators of a file, no .gguf suffix."""
    return bool(text) and not text.endswith(".gguf") and not text.startswith((".", "/", "~")) and " " not in text


def name_parts(name: str) -> list[str]:
    """[host, namespace, model, tag] as Ollama's ParseModelPath splits the name, each part checked as Ollama
    checks it (OllamaStoreError otherwise: never a path outside the store, never an OS error)."""
    base, tag = name.rsplit(":", 1) if ":" in name.rsplit("/", 1)[-1] else (name, DEFAULT_TAG)
    parts = base.split("/")
    if len(parts) == 1:
        parts = [DEFAULT_HOST, DEFAULT_NAMESPACE, parts[0]]
    elif len(parts) == 2:
        parts = [DEFAULT_HOST, *parts]
    parts.append(tag or DEFAULT_TAG)
    shown = name if len(name) <= 80 else name[:77] + "..."
    if len(parts) != 4:
        raise OllamaStoreError(f"{shown!r} is not an Ollama model name (at most host/namespace/model:tag)")
    for kind, part in zip(PART_LIMITS, parts):
        pattern = _HOST if kind == "host" else _PART
        if not pattern.fullmatch(part) or len(part) > PART_LIMITS[kind] or part in (".", ".."):
            raise OllamaStoreError(f"{shown!r} is not an Ollama model name: its {kind} must be 1 to "
                                   f"{PART_LIMITS[kind]} letters, digits, '_', '-' or '.'")
    return parts


def manifest_path(name: str, models_dir=None) -> Path:
    """host/namespace/model/tag under the store's manifests/."""
    return store_dir(models_dir).joinpath("manifests", *name_parts(name))


def _blob(root: Path, digest) -> Path:
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        raise OllamaStoreError(f"a layer digest {str(digest)[:80]!r} is not sha256:<64 hex digits> (as Ollama "
                               "requires): the manifest is not Ollama's")
    return root / "blobs" / digest.replace(":", "-")


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long for the file system, a loop of links: not a stored model
        return False


def _layers(manifest: dict, name: str) -> dict:
    layers = manifest.get("layers")
    if not isinstance(layers, list) or not all(isinstance(layer, dict) for layer in layers):
        raise OllamaStoreError(f"{name}: the manifest's layers are not a list of objects (not Ollama's manifest)")
    return {layer.get("mediaType"): layer for layer in layers if isinstance(layer.get("mediaType"), str)}


def resolve(name: str, models_dir=None) -> OllamaModel:
    """The manifest and blobs of a model pulled into the local store."""
    from ...model.sources import read_json_file
    from ...read_policy import check

    root = store_dir(models_dir)
    check(root, "the Ollama store")
    path = manifest_path(name, models_dir)
    if not _is_file(path):
        raise OllamaModelNotFound(f"{name}: no manifest at {path} (pulled with `ollama pull {name}`?)")
    manifest = read_json_file(path, f"{name}: manifest", MAX_MANIFEST_BYTES)
    layers = _layers(manifest, name)
    if MODEL_MEDIA not in layers:
        raise OllamaModelNotFound(f"{name}: manifest {path} has no {MODEL_MEDIA} layer")
    model = _blob(root, layers[MODEL_MEDIA].get("digest"))
    if not _is_file(model):
        raise OllamaModelNotFound(f"{name}: blob {model} named by the manifest is missing")
    projector = _blob(root, layers[PROJECTOR_MEDIA].get("digest")) if PROJECTOR_MEDIA in layers else None
    params = {}
    if PARAMS_MEDIA in layers and _is_file(_blob(root, layers[PARAMS_MEDIA].get("digest"))):
        params = read_json_file(_blob(root, layers[PARAMS_MEDIA]["digest"]), f"{name}: params", MAX_PARAMS_BYTES)
    return OllamaModel(name, path, model, projector, params)


def load(name: str, models_dir=None):
    """(ModelSpec, CheckpointTable, OllamaModel) of a stored model: its GGUF header read like any GGUF file."""
    from ...model.config import parse_config
    from ...model.gguf_source import load_gguf

    found = resolve(name, models_dir)
    config, table = load_gguf([found.model_blob], name)
    return parse_config(config, name=name), table, found
