"""The Hugging Face Hub as a model source, through `huggingface_hub` (imported lazily: `pip install
'vram-detective[hub]'`).

What is fetched: the repo's file list (model_info), config.json and the other small config files by one
range read each of at most their size limit + 1 bytes (MAX_CONFIG_BYTES; the index MAX_INDEX_BYTES), so a
file over the limit is refused with one line after limit + 1 bytes whatever the server claims or sends, and
the safetensors header of every shard by two HTTP range reads (the 8-byte length, then exactly that many
bytes), all concurrently, through huggingface_hub's HTTP session, URLs and auth headers (the saved login
works as everywhere else). GGUF repositories: the metadata and tensor table at the start of the chosen .gguf
file, by growing range reads.

huggingface_hub's own HfApi.get_safetensors_metadata reads the first 100 kB of every shard (about 3x a
typical shard header, and mostly tensor data for small headers); reading the exact length keeps the bytes
transferred at the header size (benchmarks/fetch.py).

Time is bounded per command: every Hub call of one fetch shares one deadline (DEFAULT_DEADLINE seconds,
VRAM_DETECTIVE_HUB_DEADLINE in the environment, or fetch(deadline=...)); a server that answers slowly,
trickles bytes or stalls makes the fetch stop there with one line (HubDeadlineError), whatever the
per-request timeout. Retries are quiet (huggingface_hub's "Trying to resume download" warnings are held back
during a fetch). A Hub answer is trusted only as far as it is checked: the commit id must be 40 hex digits
before it names a cache directory, and config files are refused over MAX_CONFIG_BYTES.

The header table and the small config files of a revision are kept, once complete, under the HF assets
cache ($HF_HOME/assets/vram-detective/, written to a temporary file and renamed), keyed by commit, so that
HF_HUB_OFFLINE=1 answers from it (config files another tool put in the HF hub cache are read too).
"""
from __future__ import annotations

import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .checkpoint import CheckpointTable, table_from_safetensors
from .hub_cache import (COMMIT, _cache_root, _repo_folder, _table_from_json, _table_to_json, cached_commit, load_cached,
                        save_cached)
from .hub_calls import (HubAnswerError, HubError, HubFileNotFoundError, HubOfflineCacheMissError, HubSettings, _call,
                        _hub)
from .hub_ranges import _Counter, read_remote_gguf, read_remote_header, read_remote_json
from .sources import (MAX_CONFIG_BYTES, MAX_INDEX_BYTES, ModelSource, UnknownModelError, index_shards, parse_json_object,
                      read_json_file)

SMALL_CONFIG_FILES = ("config.json", "quantize_config.json", "quant_config.json", "hf_quant_config.json")
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
MAX_WORKERS = 16


# --- progress -------------------------------------------------------------------------------------------


class _Progress:
    """`label: 3/30 shards` on stderr, redrawn in place: from the start on a terminal, otherwise only
    once the fetch has taken longer than `after` seconds."""

    def __init__(self, total: int, label: str, stream=None, after: float = 2.0):
        self.total, self.label, self.done = total, label, 0
        self.stream = stream or sys.stderr
        self.start = time.monotonic()
        self.after = after
        self.lock = threading.Lock()
        self.shown = False
        try:
            self.tty = self.stream.isatty()
        except (AttributeError, ValueError):
            self.tty = False

    def step(self) -> None:
        with self.lock:
            self.done += 1
            if self.total > 1 and (self.tty or time.monotonic() - self.start > self.after):
                end = "\n" if self.done == self.total and not self.tty else ""
                self.stream.write(f"\r{self.label}: {self.done}/{self.total} shards{end}")
                self.stream.flush()
                self.shown = True

    def close(self) -> None:
        if self.shown and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _concurrently(items: list[str], work, label: str):
    progress = _Progress(len(items), label)

    def run(item):
        result = work(item)
        progress.step()
        return result

    try:
        if len(items) == 1:
            return [run(items[0])]
        with ThreadPoolExecutor(max_workers=min(MAX_WORKERS, len(items))) as pool:
            return list(pool.map(run, items))
    finally:
        progress.close()


# --- the source -----------------------------------------------------------------------------------------


@dataclass
class FetchStats:
    """What one fetch transferred (for benchmarks/fetch.py)."""

    header_requests: int = 0
    header_bytes_received: int = 0  # bodies of the range reads
    header_bytes: int = 0  # sum of 8 + N over the shards
    seconds: float = 0.0
    from_cache: bool = False


def fetch(repo_id: str, revision: str | None = None, token: str | None = None, gguf_file: str | None = None,
          stats: FetchStats | None = None, deadline: float | None = None) -> ModelSource:
    """A ModelSource for a Hub repository: config from the small config files (or GGUF metadata) and the
    checkpoint table from the headers of every shard, all within `deadline` seconds (default: the
    VRAM_DETECTIVE_HUB_DEADLINE environment variable, else DEFAULT_DEADLINE)."""
    hub = _hub()
    settings = HubSettings.from_environment(token, deadline)
    _repo_folder(repo_id)  # a repository id, before it names anything
    started = time.monotonic()
    stats = stats if stats is not None else FetchStats()
    with _quiet_hub_logs():
        if settings.offline:
            source = _fetch_offline(hub, settings, repo_id, revision, gguf_file, stats)
        else:
            source = _fetch_online(hub, settings, repo_id, revision, gguf_file, stats)
    stats.seconds = time.monotonic() - started
    return source


class _quiet_hub_logs:
    """huggingface_hub logs every retry ("Trying to resume download..."); the fetch reports one line itself."""

    def __enter__(self):
        import logging

        self.logger = logging.getLogger("huggingface_hub")
        self.level = self.logger.level
        self.logger.setLevel(logging.ERROR)

    def __exit__(self, *exc):
        self.logger.setLevel(self.level)


def _download(hub, settings: HubSettings, repo_id: str, filename: str, revision: str | None, offline: bool) -> str:
    def run():
        return hub.hf_hub_download(repo_id, filename, revision=revision, cache_dir=settings.cache_dir,
                                   endpoint=settings.endpoint, token=settings.token, local_files_only=offline,
                                   etag_timeout=settings.request_timeout())

    return _call(settings, run, repo_id, revision, filename)


def _read_json(path: str, label: str, limit: int = MAX_CONFIG_BYTES) -> dict:
    return read_json_file(Path(path), label, limit)


def _merge_quant_files(config: dict, extra: dict[str, dict]) -> dict:
    from .sources import merge_quant_files

    return merge_quant_files(config, extra)


def _fetch_online(hub, settings: HubSettings, repo_id: str, revision: str | None, gguf_file: str | None,
                  stats: FetchStats) -> ModelSource:
    commit, files = _commit_and_files(hub, settings, repo_id, revision)
    label = f"{repo_id}@{commit[:12]}"
    from huggingface_hub.utils import build_hf_headers

    url_headers = build_hf_headers(token=settings.token)

    if gguf_file or ("config.json" not in files and any(name.endswith(".gguf") for name in files)):
        return _fetch_gguf(hub, settings, repo_id, revision, commit, files, gguf_file, url_headers, stats)
    if "config.json" not in files:
        raise HubFileNotFoundError(f"{label}: no config.json (and no .gguf file) in the repository")
    cached = load_cached(settings, repo_id, commit)
    kept = (cached or {}).get("files") or {}  # a commit's files never change: kept texts are not asked again
    texts: dict[str, str] = {}
    small_file = _small_file_reader(hub, settings, repo_id, commit, url_headers, kept, texts)

    # one round trip for everything the file list already names: the small JSON files, the index, and the
    # headers of the shards the standard names announce (read ahead of the index, which then confirms them)
    jobs = {name: small_file(name) for name in SMALL_CONFIG_FILES if name in files}
    if cached is None or "table" not in cached:
        if INDEX_FILE in files:
            jobs[INDEX_FILE] = small_file(INDEX_FILE, MAX_INDEX_BYTES)
        announced = _announced_shards(files)
    else:
        announced = []
    read_ahead = _HeaderReadAhead(hub, settings, repo_id, commit, announced, url_headers, stats)
    if announced:
        jobs[" shards"] = read_ahead.run
    answers = _in_parallel(jobs)
    config = _merge_quant_files(answers["config.json"], {name: answers[name] for name in SMALL_CONFIG_FILES[1:]
                                                         if name in answers})

    notes: list[str] = []
    entry = {key: value for key, value in (cached or {}).items() if key != "version"}
    table = _checkpoint_table(entry, files, answers, read_ahead, repo_id, label, notes, stats)
    if texts or ("table" in entry and "table" not in (cached or {})):
        entry["files"] = {**kept, **texts}
        save_cached(settings, repo_id, revision, commit, entry)
    if table is not None:
        stats.header_bytes = table.header_bytes
    return ModelSource(repo_id, "hub", f"{settings.endpoint}/{repo_id} @ {commit}", config, checkpoint=table,
                       revision=commit, notes=tuple(notes))


def _commit_and_files(hub, settings: HubSettings, repo_id: str, revision: str | None) -> tuple[str, list[str]]:
    """The commit the Hub resolves the revision to (checked to be a commit id) and the repository's file names."""
    api = hub.HfApi(endpoint=settings.endpoint, token=settings.token)
    info = _call(settings, lambda: api.model_info(repo_id, revision=revision, timeout=settings.request_timeout()),
                 repo_id, revision, None)
    if info.sha is not None and not (isinstance(info.sha, str) and COMMIT.fullmatch(info.sha)):
        raise HubAnswerError(f"{repo_id}: {settings.endpoint} answered commit {str(info.sha)[:60]!r}, which is not a "
                             "40-hex commit id")
    commit = info.sha or revision or "main"  # without a checked commit nothing is cached (save_cached)
    files = [sibling.rfilename for sibling in (info.siblings or []) if isinstance(sibling.rfilename, str)]
    return commit, files


def _small_file_reader(hub, settings: HubSettings, repo_id: str, commit: str, url_headers: dict,
                       kept: dict[str, str], texts: dict[str, str]):
    """small_file(name, limit) -> a job reading one small JSON file of the commit: from the kept texts, else
    from the Hub (its text then joins `texts`, to be cached; the index is not kept)."""

    def small_file(name: str, limit: int = MAX_CONFIG_BYTES):
        source = f"{repo_id}/{name}"

        def read():
            if name in kept:
                return parse_json_object(kept[name].encode("utf-8"), source, limit)
            url = hub.hf_hub_url(repo_id, name, revision=commit, endpoint=settings.endpoint)
            parsed, text = read_remote_json(url, url_headers, source, limit, settings, repo_id, name)
            if name != INDEX_FILE:
                texts[name] = text
            return parsed

        return read

    return small_file


def _checkpoint_table(entry: dict, files: list[str], answers: dict, read_ahead: _HeaderReadAhead, repo_id: str,
                      label: str, notes: list[str], stats: FetchStats):
    """The checkpoint's tensor table: from the cache entry, else from the shards' headers (then stored in the
    entry); None, with a note, when the repository has no safetensors files."""
    table = None
    if "table" in entry:
        table = _table_from_json(entry["table"])
        stats.from_cache = True
    else:
        if INDEX_FILE in files:
            index = answers[INDEX_FILE]
            shards = index_shards(index, f"{repo_id}/{INDEX_FILE}")
            missing = [shard for shard in shards if shard not in files]
            if missing:
                raise HubFileNotFoundError(f"{label}: {INDEX_FILE} names {missing[0]}, which the repository lacks")
        elif SINGLE_FILE in files:
            shards = [SINGLE_FILE]
        else:
            shards = sorted(name for name in files if name.endswith(".safetensors") and "/" not in name)
        if shards:
            table = table_from_safetensors(read_ahead.headers_for(shards), shards)
            entry["table"] = _table_to_json(table)
        else:
            notes.append("no safetensors files: tensors synthesized from config.json")
    return table


# the shard names save_pretrained writes: a file list holding them announces the checkpoint before its index
_STANDARD_SHARD = re.compile(r"model(?:-\d{5}-of-\d{5})?\.safetensors")


def _announced_shards(files: list[str]) -> list[str]:
    return sorted(name for name in files if _STANDARD_SHARD.fullmatch(name))


def _in_parallel(jobs: dict) -> dict:
    """name -> job() for every job, run at once; the first job's error (in the order given) is the one raised."""
    if len(jobs) <= 1:
        return {name: job() for name, job in jobs.items()}
    with ThreadPoolExecutor(max_workers=min(MAX_WORKERS, len(jobs))) as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
        return {name: future.result() for name, future in futures.items()}


class _HeaderReadAhead:
    """The safetensors headers of the announced shards, read while the config and index download; any other
    shard the index names is read when asked for. A read-ahead error counts only if that shard is needed."""

    def __init__(self, hub, settings: HubSettings, repo_id: str, commit: str, names: list[str], url_headers: dict,
                 stats: FetchStats):
        self.args = (hub, settings, repo_id, commit)
        self.names, self.url_headers, self.stats = names, url_headers, stats
        self.found: dict = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.found = dict(zip(self.names, self._read(self.names)))
        except Exception as error:  # noqa: BLE001 - raised again by headers_for when one of them is needed
            self.error = error

    def _read(self, names: list[str]) -> list:
        hub, settings, repo_id, commit = self.args
        return _read_headers(hub, settings, repo_id, commit, names, self.url_headers, self.stats, read_remote_header,
                             "safetensors headers")

    def headers_for(self, shards: list[str]) -> list:
        if self.error is not None and any(name in self.names for name in shards):
            raise self.error
        missing = [name for name in shards if name not in self.found]
        if missing:
            self.found.update(zip(missing, self._read(missing)))
        return [self.found[name] for name in shards]


def _read_shards(hub, settings: HubSettings, repo_id: str, commit: str, shards: list[str], url_headers: dict,
                 stats: FetchStats) -> CheckpointTable:
    headers = _read_headers(hub, settings, repo_id, commit, shards, url_headers, stats, read_remote_header,
                            "safetensors headers")
    return table_from_safetensors(headers, shards)


def _read_headers(hub, settings: HubSettings, repo_id: str, commit: str, names: list[str], url_headers: dict,
                  stats: FetchStats, reader, what: str) -> list:
    """Each file's header read by `reader` (safetensors or GGUF) in parallel, counted into `stats`."""
    counter = _Counter()

    def one(name: str):
        url = hub.hf_hub_url(repo_id, name, revision=commit, endpoint=settings.endpoint)
        return reader(url, url_headers, f"{repo_id}/{name}", settings.timeout, counter, settings, repo_id, name)

    headers = _concurrently(names, one, f"{repo_id}: {what}")
    stats.header_requests += counter.requests
    stats.header_bytes_received += counter.bytes
    return headers


def _fetch_gguf(hub, settings: HubSettings, repo_id: str, revision: str | None, commit: str, files: list[str],
                gguf_file: str | None, url_headers: dict, stats: FetchStats) -> ModelSource:
    from .gguf_source import choose_gguf, gguf_config, gguf_table

    chosen = choose_gguf(files, gguf_file, repo_id)
    key = "gguf:" + ",".join(chosen)
    cached = load_cached(settings, repo_id, commit)
    if cached is not None and key in cached:
        table = _table_from_json(cached[key]["table"])
        config = cached[key]["config"]
        stats.from_cache = True
    else:
        headers = _read_headers(hub, settings, repo_id, commit, chosen, url_headers, stats, read_remote_gguf,
                                "GGUF headers")
        table = gguf_table(headers, chosen)
        config = gguf_config(headers[0].metadata, table.tensors, f"{repo_id}/{chosen[0]}")
        entry = dict(cached or {})
        entry.pop("version", None)
        entry[key] = {"table": _table_to_json(table), "config": config}
        if gguf_file is None:
            entry.setdefault("gguf_default", key)
        save_cached(settings, repo_id, revision, commit, entry)
    stats.header_bytes = table.header_bytes
    return ModelSource(repo_id, "hub", f"{settings.endpoint}/{repo_id} @ {commit} ({', '.join(chosen)})", config,
                       checkpoint=table, revision=commit)


def _fetch_offline(hub, settings: HubSettings, repo_id: str, revision: str | None, gguf_file: str | None,
                   stats: FetchStats) -> ModelSource:
    commit = cached_commit(settings, repo_id, revision)
    cached = load_cached(settings, repo_id, commit) if commit else None
    if gguf_file or (cached is not None and "table" not in cached and "files" not in cached):
        key = None
        if cached is not None and gguf_file:
            wanted = Path(gguf_file).name
            key = next((k for k in cached if k.startswith("gguf:")
                        and wanted in [Path(n).name for n in k[5:].split(",")]), None)
        elif cached is not None:
            key = cached.get("gguf_default")
        if key is None:
            raise HubOfflineCacheMissError(f"{repo_id}: HF_HUB_OFFLINE is set and no GGUF header of it is cached "
                                           f"({_cache_root(settings, repo_id)})")
        stats.from_cache = True
        return ModelSource(repo_id, "hub", f"local cache of {repo_id} @ {commit} (HF_HUB_OFFLINE)",
                           cached[key]["config"], checkpoint=_table_from_json(cached[key]["table"]), revision=commit)
    kept = (cached or {}).get("files") or {}
    if "config.json" in kept:
        config = parse_json_object(kept["config.json"].encode("utf-8"), f"{repo_id}/config.json")
        extra = {name: parse_json_object(kept[name].encode("utf-8"), f"{repo_id}/{name}")
                 for name in SMALL_CONFIG_FILES[1:] if name in kept}
    else:  # config files another tool (or an earlier version) put in the HF hub cache
        config_path = _download(hub, settings, repo_id, "config.json", revision, True)
        commit = commit or Path(config_path).parent.name
        config = _read_json(config_path, f"{repo_id}/config.json")
        extra = {}
        for name in SMALL_CONFIG_FILES[1:]:
            try:
                extra[name] = _read_json(_download(hub, settings, repo_id, name, revision, True), f"{repo_id}/{name}")
            except (HubError, UnknownModelError):
                continue
    config = _merge_quant_files(config, extra)
    cached = cached or load_cached(settings, repo_id, commit)
    notes = []
    table = None
    if cached is not None and "table" in cached:
        table = _table_from_json(cached["table"])
        stats.from_cache = True
    else:
        notes.append("offline and no cached safetensors headers: tensors synthesized from config.json")
    return ModelSource(repo_id, "hub", f"local cache of {repo_id} @ {commit} (HF_HUB_OFFLINE)", config, checkpoint=table,
                       revision=commit, notes=tuple(notes))
