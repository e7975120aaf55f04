"""The header-table cache of model/hub.py: a revision's tensor table and small config files, once complete,
under the HF assets cache keyed by commit (written to a temporary file and renamed), so HF_HUB_OFFLINE=1
answers from it."""
from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

from .checkpoint import CheckpointTable, CheckpointTensor
from .hub_calls import REPO_ID, HubError, HubSettings


COMMIT = re.compile(r"[0-9a-f]{40}")


CACHE_FORMAT = 1


def _repo_folder(repo_id: str) -> str:
    if not REPO_ID.match(repo_id) or ".." in repo_id:
        raise HubError(f"{repo_id!r} is not a Hub repository id (org/name)")
    return "models--" + repo_id.replace("/", "--")


def _cache_root(settings: HubSettings, repo_id: str) -> Path:
    return Path(settings.assets_dir) / "vram-detective" / "hub" / _repo_folder(repo_id)


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".incomplete")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def save_cached(settings: HubSettings, repo_id: str, revision: str | None, commit: str | None, entry: dict) -> None:
    if not commit or not COMMIT.fullmatch(commit):
        return  # only a checked commit id names a cache directory
    root = _cache_root(settings, repo_id)
    try:
        _atomic_write(root / commit / "table.json", json.dumps({"version": CACHE_FORMAT, **entry}))
        _atomic_write(root / "refs" / _ref_name(revision), commit)
    except OSError:
        pass  # a read-only cache only costs the next run a fetch


def _ref_name(revision: str | None) -> str:
    from urllib.parse import quote

    name = quote(revision or "main", safe="")  # '/' and '..' can never leave refs/
    return "%2E" + name[1:] if name.startswith(".") else name


def load_cached(settings: HubSettings, repo_id: str, commit: str | None) -> dict | None:
    if not commit or not COMMIT.fullmatch(commit):
        return None
    path = _cache_root(settings, repo_id) / commit / "table.json"
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return entry if entry.get("version") == CACHE_FORMAT else None


def cached_commit(settings: HubSettings, repo_id: str, revision: str | None) -> str | None:
    if revision and COMMIT.fullmatch(revision):
        return revision
    try:
        commit = (_cache_root(settings, repo_id) / "refs" / _ref_name(revision)).read_text().strip()
    except OSError:
        return None
    return commit if COMMIT.fullmatch(commit) else None


def _table_to_json(table: CheckpointTable) -> dict:
    return {"format": table.format, "files": list(table.files), "header_bytes": table.header_bytes,
            "metadata": table.metadata,
            "tensors": [[t.name, list(t.shape), t.dtype, t.nbytes, t.file, t.hf_name] for t in table.tensors]}


def _table_from_json(data: dict) -> CheckpointTable:
    tensors = tuple(CheckpointTensor(name, tuple(shape), dtype, nbytes, file, hf) for name, shape, dtype, nbytes, file, hf
                    in data["tensors"])
    return CheckpointTable(data["format"], tensors, tuple(data["files"]), int(data["header_bytes"]), data.get("metadata") or {})
