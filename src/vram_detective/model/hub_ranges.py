"""Range reads of Hub files (model/hub.py): a safetensors header by its exact length, a GGUF prefix by growing
reads, a small JSON file capped at its size limit; every header byte of a repository counted against a budget."""
from __future__ import annotations

import re
import threading

from .hub_calls import HubSettings, _call, _hub
from .safetensors_headers import TruncatedHeaderError, header_length, parse_header
from .sources import MalformedConfigError, parse_json_object


GGUF_FIRST_READ = 256 * 1024


GGUF_MARGIN = 64 * 1024


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
