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

import json
import os
import re
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..errors import NotFound
from .checkpoint import CheckpointTable, CheckpointTensor, table_from_safetensors
from .safetensors_headers import TruncatedHeaderError, header_length, parse_header
from .sources import (MAX_CONFIG_BYTES, MAX_INDEX_BYTES, MalformedConfigError, ModelSource, UnknownModelError,
                      index_shards, parse_json_object, read_json_file)

SMALL_CONFIG_FILES = ("config.json", "quantize_config.json", "quant_config.json", "hf_quant_config.json")
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
GGUF_FIRST_READ = 256 * 1024
GGUF_MARGIN = 64 * 1024
MAX_WORKERS = 16
DEFAULT_DEADLINE = 120.0  # seconds for all the Hub calls of one command (VRAM_DETECTIVE_HUB_DEADLINE)
COMMIT = re.compile(r"[0-9a-f]{40}")
CACHE_FORMAT = 1
LOGIN_HINT = "log in with `huggingface-cli login` (or `hf auth login`), or set HF_TOKEN, or pass --hf-token"


class HubError(NotFound):
    """Anything the Hub source cannot answer; one line."""


class HubNotInstalledError(HubError):
    pass


class GatedRepoTokenError(HubError):
    pass


class HubRepoNotFoundError(UnknownModelError):
    pass


class HubRevisionNotFoundError(HubError):
    pass


class HubFileNotFoundError(HubError):
    pass


class HubUnreachableError(UnknownModelError):
    """Network down, DNS failing, or the server too slow (after a retry)."""


class HubOfflineCacheMissError(UnknownModelError):
    pass


class HubDeadlineError(HubUnreachableError):
    """The command's Hub deadline passed before the answers were in."""


class HubAnswerError(HubError):
    """The server answered something no Hub answers (a commit id that is not one, a redirect loop)."""


@dataclass(frozen=True)
class HubSettings:
    endpoint: str
    cache_dir: str
    assets_dir: str
    offline: bool
    token: str | None
    timeout: float
    tries: int = 2
    deadline: float = DEFAULT_DEADLINE  # seconds for the whole fetch
    expires: float = float("inf")  # time.monotonic() at which the fetch gives up

    def left(self) -> float:
        """Seconds until the deadline; HubDeadlineError once it has passed."""
        left = self.expires - time.monotonic()
        if left <= 0:
            raise HubDeadlineError(f"{self.endpoint} did not give its answers within the {self.deadline:g} s deadline "
                                   "(VRAM_DETECTIVE_HUB_DEADLINE); check the network, or set HF_HUB_OFFLINE=1 to use the "
                                   "local cache")
        return left

    def request_timeout(self) -> float:
        return max(0.05, min(self.timeout, self.left()))

    @classmethod
    def from_environment(cls, token: str | None = None, deadline: float | None = None) -> "HubSettings":
        """Read at call time (huggingface_hub.constants are frozen when it is first imported)."""
        hf_home = os.environ.get("HF_HOME")
        _hub()
        from huggingface_hub import constants
        cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or (
            os.path.join(hf_home, "hub") if hf_home else constants.HF_HUB_CACHE)
        assets = os.environ.get("HF_ASSETS_CACHE") or (os.path.join(hf_home, "assets") if hf_home else constants.HF_ASSETS_CACHE)
        endpoint = (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
        token = token or os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN") or None
        timeout = _seconds(os.environ.get("VRAM_DETECTIVE_HUB_TIMEOUT") or os.environ.get("HF_HUB_DOWNLOAD_TIMEOUT"),
                           "VRAM_DETECTIVE_HUB_TIMEOUT", 10.0)
        offline = _truthy(os.environ.get("HF_HUB_OFFLINE"))
        # huggingface_hub froze HF_HUB_OFFLINE when it was first imported; its download functions consult the
        # module constant, so keep it in step with the environment of this call
        constants.HF_HUB_OFFLINE = offline
        if deadline is None:
            deadline = _seconds(os.environ.get("VRAM_DETECTIVE_HUB_DEADLINE"), "VRAM_DETECTIVE_HUB_DEADLINE", DEFAULT_DEADLINE)
        if not (isinstance(deadline, (int, float)) and 0 < deadline < float("inf")):
            raise HubError(f"Hub deadline {deadline!r}: give a positive number of seconds")
        return cls(endpoint, cache, assets, offline, token, timeout, deadline=float(deadline),
                   expires=time.monotonic() + float(deadline))


def _seconds(text: str | None, name: str, default: float) -> float:
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise HubError(f"{name}={text!r}: give a number of seconds") from None
    if not 0 < value < float("inf"):
        raise HubError(f"{name}={text!r}: give a positive number of seconds")
    return value


def _truthy(value: str | None) -> bool:
    return (value or "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _hub():
    try:
        import huggingface_hub
    except ImportError:
        raise HubNotInstalledError(
            "the Hugging Face Hub source needs huggingface_hub: pip install 'vram-detective[hub]'"
        ) from None
    return huggingface_hub


REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$|^[A-Za-z0-9][\w.-]*$")


def looks_like_repo_id(reference: str) -> bool:
    return bool(REPO_ID.match(reference)) and ".." not in reference and not reference.endswith((".gguf", ".json"))


# --- errors ---------------------------------------------------------------------------------------------

_TIMEOUTS = {"TimeoutException", "Timeout", "ReadTimeout", "ConnectTimeout", "WriteTimeout", "PoolTimeout",
             "TimeoutError", "ReadTimeoutError", "ConnectTimeoutError"}
_NETWORK = {"ConnectError", "ConnectionError", "NetworkError", "RemoteProtocolError", "ProxyError", "ReadError",
            "ProtocolError", "TransportError", "OfflineModeIsEnabled", "MaxRetryError", "NewConnectionError",
            "DecodingError", "InvalidURL", "UnsupportedProtocol", "LocalProtocolError"}
_REDIRECTS = {"TooManyRedirects"}


def _names(error: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(error).__mro__}


def _is_timeout(error: BaseException) -> bool:
    return bool(_names(error) & _TIMEOUTS)


def _translate(error: BaseException, repo_id: str, revision: str | None, filename: str | None,
               settings: HubSettings) -> Exception:
    names = _names(error)
    where = f"{repo_id}" + (f"@{revision}" if revision else "")
    if "GatedRepoError" in names:
        if settings.token:
            return GatedRepoTokenError(f"{repo_id} is gated and this token has no access: accept its terms at "
                                       f"{settings.endpoint}/{repo_id}, then retry")
        return GatedRepoTokenError(f"{repo_id} is gated: accept its terms at {settings.endpoint}/{repo_id}, then {LOGIN_HINT}")
    if "RepositoryNotFoundError" in names:
        return HubRepoNotFoundError(f"{repo_id}: no such model on {settings.endpoint} (if it is private, {LOGIN_HINT})")
    if "RevisionNotFoundError" in names:
        return HubRevisionNotFoundError(f"{repo_id}: no revision {revision!r} (a branch, tag or commit) on {settings.endpoint}")
    if "LocalEntryNotFoundError" in names or "OfflineModeIsEnabled" in names:
        if settings.offline:
            return HubOfflineCacheMissError(
                f"{where}: HF_HUB_OFFLINE is set and {filename or 'its config'} is not in the local cache ({settings.cache_dir})")
        return HubUnreachableError(f"{where}: cannot reach {settings.endpoint} and {filename or 'the file'} is not cached "
                                   "(check the network, or HF_ENDPOINT)")
    if "EntryNotFoundError" in names:
        return HubFileNotFoundError(f"{where}: no file {filename!r} in the repository")
    if names & _REDIRECTS:
        return HubAnswerError(f"{where}: {settings.endpoint} redirects in a loop ({_first_line(error)})")
    if names & _TIMEOUTS:
        return HubUnreachableError(f"{where}: {settings.endpoint} did not answer within {settings.timeout:g} s "
                                   f"({settings.tries} tries); check the network, or set HF_HUB_OFFLINE=1 to use the local cache")
    if names & _NETWORK:
        return HubUnreachableError(f"{where}: cannot reach {settings.endpoint} ({_first_line(error)}); check the network "
                                   "or HF_ENDPOINT, or set HF_HUB_OFFLINE=1 to use the local cache")
    if "HfHubHTTPError" in names:
        status = getattr(getattr(error, "response", None), "status_code", "?")
        if status == 401:
            return GatedRepoTokenError(f"{where}: the Hub refused access (HTTP 401); {LOGIN_HINT}")
        return HubUnreachableError(f"{where}: {settings.endpoint} answered HTTP {status} for {filename or 'the repository'}")
    if isinstance(error, (ValueError, LookupError, OSError)):  # one line already (the CLI prints the first)
        return error
    # anything else from the HTTP stack is an answer this tool cannot read: one line, not a traceback
    return HubAnswerError(f"{where}: {settings.endpoint} gave an answer this tool cannot read "
                          f"({type(error).__name__}: {_first_line(error)})")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _call(settings: HubSettings, what, repo_id: str, revision: str | None, filename: str | None):
    """Run one Hub call within the deadline; retry a timeout (settings.tries in all) while time is left;
    translate errors into ours."""
    for attempt in range(settings.tries):
        try:
            return _before_deadline(settings, what)
        except Exception as error:  # huggingface_hub / httpx / requests exceptions, classified by name
            if type(error).__module__.startswith("vram_detective."):
                raise  # ours (header errors, the deadline, ...) are already one clear line
            if _is_timeout(error) and attempt + 1 < settings.tries and settings.left() > 0.2 * (attempt + 1):
                time.sleep(0.2 * (attempt + 1))
                continue
            raise _translate(error, repo_id, revision, filename, settings) from None
    raise AssertionError("unreachable")


def _before_deadline(settings: HubSettings, what):
    """what() in a daemon thread, waited for until the deadline: huggingface_hub's own calls (model info, file
    downloads) retry and resume inside, where no per-request timeout bounds a server that trickles bytes. At
    the deadline the thread is left to end on its own (a daemon: it never holds the process open)."""
    if settings.expires == float("inf"):
        return what()
    outcome: dict = {}

    def run():
        try:
            outcome["value"] = what()
        except BaseException as error:  # handed to the caller's thread
            outcome["error"] = error

    worker = threading.Thread(target=run, name="vram-detective-hub", daemon=True)
    worker.start()
    worker.join(settings.left())
    if worker.is_alive():
        settings.left()  # raises HubDeadlineError once the time is up
        worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


# --- range reads ----------------------------------------------------------------------------------------


# Headers of one repository in all: real checkpoints' are a few MB (a 163-shard DeepSeek-V3 ~ 17 MB of JSON); 16
# shards each claiming a 99 MB header took 1.35 GiB before (issue 31).
MAX_REPO_HEADER_BYTES = 64 * 1024 * 1024


class _Counter:
    def __init__(self, budget: int = MAX_REPO_HEADER_BYTES):
        self.lock = threading.Lock()
        self.bytes = 0
        self.requests = 0
        self.reserved = 0
        self.budget = budget

    def add(self, amount: int) -> None:
        with self.lock:
            self.bytes += amount
            self.requests += 1

    def reserve(self, amount: int, source: str) -> None:
        """Claim `amount` header bytes before they are fetched: refused past the repository's budget."""
        from .safetensors_headers import OversizedHeaderError

        with self.lock:
            self.reserved += amount
            if self.reserved > self.budget:
                raise OversizedHeaderError(f"{source}: the headers of this repository claim over {self.budget:,} bytes "
                                           "in all (real checkpoints' take a few MB): not fetched")


def _content_range_total(value: str | None) -> int | None:
    match = re.match(r"bytes \d+-\d+/(\d+)", value or "")
    return int(match.group(1)) if match else None


def range_get(url: str, headers: dict, start: int, end: int, timeout: float, counter: _Counter | None = None,
              settings: HubSettings | None = None) -> tuple[bytes, int | None]:
    """Bytes start..end (inclusive) of a Hub file and the file's size, through huggingface_hub's session.
    A server that ignores Range is read only as far as needed, then the connection is dropped."""
    _hub()
    from huggingface_hub.utils import get_session, hf_raise_for_status

    want = end - start + 1
    request_headers = {**headers, "Range": f"bytes={start}-{end}", "Accept-Encoding": "identity"}
    session = get_session()
    if callable(getattr(session, "stream", None)):  # httpx-based huggingface_hub (>= 1.0; requests has a bool)
        with session.stream("GET", url, headers=request_headers, timeout=timeout) as response:
            return _consume(response, response.iter_bytes, start, want, counter, hf_raise_for_status, settings)
    response = session.get(url, headers=request_headers, timeout=timeout, stream=True)  # requests (< 1.0)
    try:
        return _consume(response, lambda: response.iter_content(65536), start, want, counter, hf_raise_for_status,
                        settings)
    finally:
        response.close()


def _consume(response, chunks, start: int, want: int, counter, raise_for_status,
             settings: HubSettings | None = None) -> tuple[bytes, int | None]:
    if response.status_code == 416:
        raise TruncatedHeaderError(f"{response.url}: file shorter than the {start + want} bytes its header needs")
    if response.status_code >= 400:
        if hasattr(response, "iter_content"):
            response.content  # noqa: B018 - requests: load the (small) error body for the message
        else:
            response.read()  # httpx: a streamed body must be read before it is inspected
        raise_for_status(response)
    skip = start if response.status_code == 200 else 0  # Range ignored: the body starts at byte 0
    received = bytearray()
    for chunk in chunks():
        received += chunk
        if settings is not None:
            settings.left()  # a server trickling bytes stops here at the deadline
        # a 206 body is exactly what was asked: read to its end so the connection goes back to the pool;
        # a 200 (Range ignored) is cut as soon as the bytes needed are in
        if len(received) >= skip + want and (skip or len(received) > want):
            break
    if counter is not None:
        counter.add(len(received))
    total = _content_range_total(response.headers.get("Content-Range"))
    if total is None and response.status_code == 200 and response.headers.get("Content-Length"):
        total = int(response.headers["Content-Length"])
    return bytes(received[skip:skip + want]), total


def read_remote_header(url: str, headers: dict, source: str, timeout: float, counter: _Counter | None = None,
                       settings: HubSettings | None = None, repo_id: str = "", filename: str = ""):
    """A safetensors header by two range reads: the 8-byte length (checked against the limit and the file
    size before anything more is asked for), then exactly that many bytes."""

    def get(start: int, end: int):
        if settings is None:
            return range_get(url, headers, start, end, timeout, counter)
        return _call(settings, lambda: range_get(url, headers, start, end, settings.request_timeout(), counter, settings),
                     repo_id, None, filename)

    prefix, size = get(0, 7)
    length = header_length(prefix, source, size)
    if counter is not None:
        counter.reserve(length, source)
    blob, _ = get(8, 8 + length - 1)
    if len(blob) != length:
        raise TruncatedHeaderError(f"{source}: truncated safetensors header ({len(blob):,} of {length:,} bytes)")
    return parse_header(blob, source, size, settings.left if settings is not None else None)


def read_remote_gguf(url: str, headers: dict, source: str, timeout: float, counter: _Counter | None = None,
                     settings: HubSettings | None = None, repo_id: str = "", filename: str = ""):
    from .gguf_source import NeedMoreBytes, parse_prefix

    def get(start: int, end: int):
        if settings is None:
            return range_get(url, headers, start, end, timeout, counter)
        return _call(settings, lambda: range_get(url, headers, start, end, settings.request_timeout(), counter, settings),
                     repo_id, None, filename)

    data, size = get(0, GGUF_FIRST_READ - 1)
    while True:
        try:
            return parse_prefix(data, source, size, settings.left if settings is not None else None)
        except NeedMoreBytes as more:
            if size is not None and len(data) >= size:
                raise
            # what the parser asked for (it estimates the rest of a long array) plus a margin for the
            # tensor infos that follow: over-reading past the header only fetches tensor data
            end = max(more.needed, len(data)) + GGUF_MARGIN
            if size is not None:
                end = min(end, size)
            chunk, _ = get(len(data), end - 1)
            if not chunk:
                from .gguf_source import GGUFError

                raise GGUFError(f"{source}: truncated GGUF file") from None
            data += chunk


def read_remote_json(url: str, headers: dict, source: str, limit: int, settings: HubSettings, repo_id: str,
                     filename: str) -> tuple[dict, str]:
    """A small JSON file (config, quantization file, index) and its text, by one range read of limit + 1
    bytes: a file over `limit` is refused with one line without being downloaded (a server that ignores
    Range is cut after limit + 1 bytes; the size it announces only makes the message exact)."""

    def get():
        return range_get(url, headers, 0, limit, settings.request_timeout(), None, settings)

    try:
        data, size = _call(settings, get, repo_id, None, filename)
    except TruncatedHeaderError:  # 416: nothing at byte 0, an empty file
        data, size = b"", 0
    if len(data) > limit or (size is not None and size > limit):
        shown = f"{size:,} bytes" if size is not None and size > limit else f"over {limit:,} bytes"
        raise MalformedConfigError(f"{source}: {shown}, over the {limit:,}-byte limit for this file; not downloaded")
    parsed = parse_json_object(data, source, limit)
    return parsed, data.decode("utf-8")


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


# --- the header-table cache ---------------------------------------------------------------------------


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
