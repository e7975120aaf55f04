"""Where a model's config comes from, in the order a reference is resolved: a local checkpoint (a directory
with config.json and safetensors shards, read by their headers only; a .gguf file or a directory of them),
the packaged catalog (offline default), then the Hugging Face Hub (hub.py). docs/sources.md."""
from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import NotFound

if TYPE_CHECKING:
    from .checkpoint import CheckpointTable

CATALOG_DIR = Path(__file__).resolve().parent / "catalog"


class UnknownModelError(NotFound):
    pass


class MalformedConfigError(ValueError):
    pass


class UnsafeShardPathError(MalformedConfigError):
    """An index that names a file outside the model directory (an absolute path, '..', a link out)."""


# Size limits on the JSON files read beside a checkpoint (configs are kilobytes; the largest indexes, with
# ~100k tensors, are ~10 MB) and on their nesting (real files nest a few levels).
MAX_CONFIG_BYTES = 8 << 20
MAX_INDEX_BYTES = 64 << 20
MAX_JSON_DEPTH = 64


def parse_json_object(data: bytes, label: str, limit: int = MAX_CONFIG_BYTES) -> dict:
    """A JSON object from `data`, or one line (MalformedConfigError): over `limit` bytes, not UTF-8 JSON,
    nested deeper than MAX_JSON_DEPTH, or not an object."""
    if len(data) > limit:
        raise MalformedConfigError(f"{label}: {len(data):,} bytes, over the {limit:,}-byte limit for this file")
    try:
        parsed = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise MalformedConfigError(f"{label}: not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise MalformedConfigError(f"{label}: not valid JSON ({error.msg} at line {error.lineno})") from None
    except RecursionError:
        raise MalformedConfigError(f"{label}: JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    if not isinstance(parsed, dict):
        raise MalformedConfigError(f"{label}: not a JSON object")
    if _depth(parsed) > MAX_JSON_DEPTH:
        raise MalformedConfigError(f"{label}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return parsed


def _depth(value) -> int:
    """Nesting depth of parsed JSON, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if level <= MAX_JSON_DEPTH:
                stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def read_json_file(path: Path, label: str | None = None, limit: int = MAX_CONFIG_BYTES) -> dict:
    """A local JSON object file, read only when it is a regular file and at most `limit` bytes."""
    from ..units import open_regular_file

    with open_regular_file(path, "the JSON file") as handle:
        size = os.fstat(handle.fileno()).st_size
        data = handle.read(min(size, limit) + 1)  # (read(limit) would allocate the whole limit up front)
    return parse_json_object(data, label or str(path), limit)


@dataclass(frozen=True)
class ModelSource:
    repo_id: str
    origin: str  # "catalog", "local", "gguf" or "hub"
    provenance: str
    config: dict
    # every stored tensor's shape and dtype, from safetensors headers or a GGUF tensor table (None: the
    # catalog, or a source without headers); model/checkpoint.py compares it with vLLM's layout
    checkpoint: "CheckpointTable | None" = field(default=None, compare=False)
    revision: str | None = None  # the Hub commit the files were read at
    notes: tuple[str, ...] = ()


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


def merge_quant_files(config: dict, extra: dict[str, dict]) -> dict:
    """Quantization blocks kept beside config.json, as vLLM reads them when the config has none:
    hf_quant_config.json (ModelOpt), quantize_config.json (AutoGPTQ), quant_config.json (AutoAWQ)."""
    if "quantization_config" in config or "compression_config" in config:
        return config
    config = dict(config)
    if "hf_quant_config.json" in extra:
        quant = extra["hf_quant_config.json"].get("quantization", {})
        config["quantization_config"] = {"quant_method": "modelopt", **quant}
    elif "quantize_config.json" in extra or "quant_config.json" in extra:
        quant = dict(extra.get("quantize_config.json") or extra["quant_config.json"])
        if "quant_method" not in quant:
            if "w_bit" in quant:  # AutoAWQ's own names
                quant = {"quant_method": "awq", "bits": quant["w_bit"], "group_size": quant.get("q_group_size", 128),
                         "zero_point": quant.get("zero_point", True), "version": quant.get("version", "gemm")}
            else:
                quant["quant_method"] = "gptq"
        config["quantization_config"] = quant
    return config


def _read_json_file(path: Path) -> dict:
    return read_json_file(path)


def index_shards(index: dict, label: str) -> list[str]:
    """The shard names an index's weight_map gives (checked: an object of tensor name -> file name)."""
    weight_map = index.get("weight_map") or {}
    if not isinstance(weight_map, dict) or not all(isinstance(name, str) and name for name in weight_map.values()):
        raise MalformedConfigError(f"{label}: weight_map is not an object of tensor name -> shard file name")
    return sorted(set(weight_map.values()))


def _inside(directory: Path, shard: str, label: str) -> Path:
    """directory/shard, refused unless it stays inside the directory once every link is resolved."""
    if "\x00" in shard or Path(shard).is_absolute() or ".." in Path(shard).parts:
        raise UnsafeShardPathError(f"{label}: names {shard!r}, which is outside the model directory")
    root = directory.resolve()
    path = (directory / shard).resolve()
    if root != path and root not in path.parents:
        raise UnsafeShardPathError(f"{label}: names {shard!r}, which links outside the model directory ({path})")
    return directory / shard


def _safetensors_files(directory: Path) -> list[Path]:
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        shards = index_shards(read_json_file(index, limit=MAX_INDEX_BYTES), str(index))
        paths = [_inside(directory, shard, str(index)) for shard in shards]
        for shard, path in zip(shards, paths):
            if not path.is_file():
                raise UnknownModelError(f"{index}: names {shard}, which is not in {directory}")
        return paths
    return sorted(path for path in directory.glob("*.safetensors") if _inside(directory, path.name, str(directory)))


def _read_local(directory: Path) -> ModelSource:
    config_path = directory / "config.json"
    config = _read_json_file(config_path)
    extra = {name: _read_json_file(directory / name)
             for name in ("hf_quant_config.json", "quantize_config.json", "quant_config.json")
             if (directory / name).is_file()}
    config = merge_quant_files(config, extra)
    checkpoint = None
    shards = _safetensors_files(directory)
    if shards:
        from .checkpoint import table_from_safetensors
        from .safetensors_headers import read_header

        checkpoint = table_from_safetensors([read_header(shard) for shard in shards], [shard.name for shard in shards])
    return ModelSource(str(directory), "local", str(config_path), config, checkpoint=checkpoint)


def _read_gguf(path: Path, gguf_file: str | None) -> ModelSource:
    from .gguf_source import choose_gguf, load_gguf

    if path.is_dir():
        names = [p.name for p in path.iterdir() if p.is_file()]
        files = [path / name for name in choose_gguf(names, gguf_file, str(path))]
    else:
        files = [path.parent / name for name in choose_gguf([p.name for p in path.parent.iterdir()], path.name, str(path))]
    config, table = load_gguf(files, str(files[0]))
    return ModelSource(str(path), "gguf", ", ".join(str(f) for f in files), config, checkpoint=table)


def _is_gguf_path(path: Path) -> bool:
    if path.is_file():
        return path.suffix == ".gguf"
    return path.is_dir() and not (path / "config.json").is_file() and any(path.glob("*.gguf"))


def _from_hub(reference: str, revision, token, gguf_file, deadline: float | None = None) -> ModelSource:
    from .hub import fetch

    return fetch(reference, revision=revision, token=token, gguf_file=gguf_file, deadline=deadline)


def _hub_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("huggingface_hub") is not None


def _names_a_path(reference: str) -> bool:
    """A reference that can only be a local path (never a catalog or Hub id)."""
    text = reference.strip()
    return (text.startswith(("/", ".", "~", "\\")) or "\\" in text or ".." in text.split("/")
            or text.lower().endswith((".gguf", ".json", ".safetensors")) or text.count("/") > 1)


def load_model(reference: str, source: str | None = None, revision: str | None = None, token: str | None = None,
               gguf_file: str | None = None, hub_deadline: float | None = None) -> ModelSource:
    """A local checkpoint (directory with config.json and safetensors, a .gguf file or a directory of them),
    then the built-in catalog (case-insensitive), then the Hugging Face Hub.

    `source` forces one of "local", "catalog", "hub", "gguf"; `revision`, `token` and `gguf_file` are for
    the Hub and GGUF sources; `hub_deadline` bounds the seconds all Hub calls may take (hub.py)."""
    if source not in (None, "local", "catalog", "hub", "gguf"):
        raise UnknownModelError(f"unknown source {source!r} (local, catalog, hub or gguf)")
    try:
        path = Path(reference).expanduser()
    except RuntimeError:  # '~nouser/x': no such user, so no such path
        path = Path(reference)
    from ..read_policy import check, exists, may_probe

    if not may_probe(path) and (source in ("local", "gguf") or _names_a_path(reference)):
        check(path, reference)  # the server's one "not allowed" line, whether or not the path exists
    if source in (None, "local", "gguf") and exists(path):
        if source == "gguf" or (gguf_file and path.is_dir()) or _is_gguf_path(path):
            return _read_gguf(path, gguf_file)
        if path.is_dir():
            if not (path / "config.json").is_file():
                raise UnknownModelError(f"{reference}: directory has no config.json (and no .gguf file)")
            return _read_local(path)
        if path.is_file() and path.name == "config.json":
            return _read_local(path.parent)
        raise UnknownModelError(f"{reference}: not a model directory, config.json or .gguf file")
    if source == "local":
        raise UnknownModelError(f"{reference}: no such local directory or file")
    if source in ("hub", "gguf"):
        return _from_hub(reference.strip(), revision, token, gguf_file, hub_deadline)
    files = _catalog_files()
    found = files.get(reference.strip().lower())
    if found is not None and not (revision or gguf_file):
        return _read_catalog(found)
    if source == "catalog":
        if found is not None:
            return _read_catalog(found)
        raise _not_found(reference, files, "not in the built-in catalog")
    from .hub_calls import looks_like_repo_id

    if looks_like_repo_id(reference.strip()) and "/" in reference and _hub_available():
        try:
            return _from_hub(reference.strip(), revision, token, gguf_file, hub_deadline)
        except UnknownModelError as error:
            if found is not None:
                raise
            raise _not_found(reference, files, f"not in the built-in catalog, not a local path, and {error}") from None
    if found is not None:
        return _read_catalog(found)
    hint = "" if _hub_available() else "; `pip install 'vram-detective[hub]'` to read any model from the Hugging Face Hub"
    raise _not_found(reference, files, f"not in the built-in catalog and not a local directory{hint}")


def _not_found(reference: str, files: dict, why: str) -> UnknownModelError:
    close = difflib.get_close_matches(reference.lower(), list(files), n=3, cutoff=0.6)
    hint = f"; did you mean: {', '.join(_read_catalog(files[c]).repo_id for c in close)}?" if close else ""
    return UnknownModelError(f"unknown model {reference!r}: {why}{hint} (`vram-detective models` lists the catalog)")
