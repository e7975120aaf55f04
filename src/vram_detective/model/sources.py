"""Where a model's config comes from: the packaged catalog (offline default) or a local directory."""
from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

CATALOG_DIR = Path(__file__).resolve().parent / "catalog"


class UnknownModelError(LookupError):
    pass


class MalformedConfigError(ValueError):
    pass


@dataclass(frozen=True)
class ModelSource:
    repo_id: str
    origin: str  # "catalog" or "local"
    provenance: str
    config: dict


@lru_cache(maxsize=1)
def _catalog_files() -> dict[str, Path]:
    """lower-case repo id -> file; file names are 'org--name.json'."""
    files = {}
    for name in os.listdir(CATALOG_DIR):
        if name.endswith(".json"):
            org, _, model = name[:-5].partition("--")
            files[f"{org}/{model}".lower()] = CATALOG_DIR / name
    return files


def _read_catalog(path: Path) -> ModelSource:
    entry = json.loads(path.read_text())
    return ModelSource(entry["repo_id"], "catalog", entry.get("source", ""), entry["config"])


def catalog_entries() -> list[ModelSource]:
    return [_read_catalog(path) for _, path in sorted(_catalog_files().items())]


def _read_local(directory: Path) -> ModelSource:
    config_path = directory / "config.json"
    try:
        config = json.loads(config_path.read_text())
    except json.JSONDecodeError as error:
        raise MalformedConfigError(f"{config_path}: not valid JSON ({error.msg} at line {error.lineno})") from None
    if not isinstance(config, dict):
        raise MalformedConfigError(f"{config_path}: not a JSON object")
    quant_path = directory / "hf_quant_config.json"
    if quant_path.is_file() and "quantization_config" not in config:
        # ModelOpt keeps its quantization block beside config.json (vLLM reads it there too)
        quant = json.loads(quant_path.read_text()).get("quantization", {})
        config["quantization_config"] = {"quant_method": "modelopt", **quant}
    return ModelSource(str(directory), "local", str(config_path), config)


def load_model(reference: str, source: str | None = None, revision: str | None = None, token: str | None = None,
               gguf_file: str | None = None) -> ModelSource:
    """A Hugging Face repo id from the catalog (case-insensitive) or a local model directory.

    `source` forces one of "local", "catalog", "hub", "gguf"; `revision`, `token` and `gguf_file` are for
    the Hub and GGUF sources."""
    if source in ("hub", "gguf"):
        raise UnknownModelError(f"the {source} source is not available yet")
    path = Path(reference).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UnknownModelError(f"{reference}: directory has no config.json")
        return _read_local(path)
    if path.is_file() and path.name == "config.json":
        return _read_local(path.parent)
    files = _catalog_files()
    found = files.get(reference.strip().lower())
    if found is not None:
        return _read_catalog(found)
    close = difflib.get_close_matches(reference.lower(), list(files), n=3, cutoff=0.6)
    hint = f"; did you mean: {', '.join(_read_catalog(files[c]).repo_id for c in close)}?" if close else ""
    raise UnknownModelError(
        f"unknown model {reference!r}: not in the built-in catalog and not a local directory{hint}"
        " (`vram-detective models` lists the catalog)"
    )
