"""Reading a text log of any size, engine-neutral: 1 MiB chunks, one line at a time, binary input refused.

Every engine's log reader and `logs` itself read their input through LineReader: memory stays bounded whatever
the file holds (a 1 GB file without a newline is cut into MAX_LINE_CHARS pieces, never held whole)."""
from __future__ import annotations

import codecs
import re

CHUNK_BYTES = 1 << 20
# Lines longer than this are cut to their first MAX_LINE_CHARS characters (and counted in `truncated_lines`):
# vLLM's longest records (the engine config line, non-default args) are a few KiB, and a cap keeps the work
# per line bounded (a 1 GB file without newlines is still streamed). Every pattern of engines/vllm/logs/reader.py
# runs in time linear in the line (numbers are bounded: at most 15 integer and 20 fraction digits), so a cut line
# costs at most a few milliseconds whatever it holds (benchmarks/hostile.py).
MAX_LINE_CHARS = 64 * 1024
SNIFF_BYTES = 8192
_NEWLINES = re.compile("\n+")


class LogInputError(ValueError):
    """The input is not a readable engine log (binary, empty, or without one memory line of the engine)."""


def _looks_binary(head: bytes) -> bool:
    if not head:
        return False
    if b"\x00" in head:
        return True
    if head.startswith((b"\x1f\x8b", b"PK\x03\x04", b"\x89PNG", b"%PDF", b"\x7fELF", b"BZh", b"\xfd7zXZ")):
        return True
    text_bytes = sum(1 for byte in head if byte >= 32 or byte in (9, 10, 12, 13, 27))
    if text_bytes / len(head) < 0.85:
        return True
    # a few stray bytes (latin-1 text, a cut multi-byte character) are fine; mostly undecodable data is not text
    bad = head.decode("utf-8", errors="replace").count("\ufffd")
    return bad > max(16, len(head) // 20)


class LineReader:
    """Text lines of a binary stream, read in 1 MiB chunks (never the whole input at once).

    "\r\n", "\n" and a bare "\r" (progress bars) end a line. Lines longer than MAX_LINE_CHARS are cut
    (the rest up to the next line break is skipped and counted in `truncated`). Raises LogInputError for
    binary data."""

    def __init__(self, stream, name: str = "input", collapse_blank: bool = False) -> None:
        self._stream = stream
        self.name = name
        self.truncated = 0
        self.bytes_read = 0
        # a run of blank lines yields one "" and counts the rest here (the consumer adds them to its line count
        # and resets it): 100 MB of bare "\r" costs one step a run, not one a line
        self.collapse_blank = collapse_blank
        self.blank_skipped = 0
        self._pending: list[str] = []  # the line read so far, its pieces (a line can span chunks)
        self._pending_len = 0
        self._skipping = False  # inside the rest of an over-long line

    def _read(self, size: int) -> bytes:
        data = self._stream.read(size)
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError("LineReader needs a binary stream")
        self.bytes_read += len(data)
        return bytes(data)

    def __iter__(self):
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        chunk = self._read(SNIFF_BYTES)
        if _looks_binary(chunk):
            raise LogInputError(f"{self.name} is not a text log (binary data)")
        self._pending, self._pending_len, self._skipping = [], 0, False
        carry = ""
        while True:
            final = not chunk
            if self._skipping and not final:
                chunk = self._past_long_line(chunk, decoder)
                carry = carry if self._skipping else ""
                continue
            text = carry + decoder.decode(chunk, final=final)
            carry = ""
            if not final and text.endswith("\r"):
                carry, text = "\r", text[:-1]
            if "\r" in text:
                text = text.replace("\r\n", "\n").replace("\r", "\n")
            yield from self._lines(text)
            if final:
                break
            chunk = self._read(CHUNK_BYTES)
        if self._pending and not self._skipping:
            yield "".join(self._pending)

    def _past_long_line(self, chunk: bytes, decoder) -> bytes:
        """The rest of an over-long line: find its end in the raw bytes, decode nothing before it; the next bytes
        to read (skipping ends where the line does)."""
        cut = min((i for i in (chunk.find(b"\n"), chunk.find(b"\r")) if i >= 0), default=-1)
        if cut < 0:
            return self._read(CHUNK_BYTES)
        decoder.reset()
        self._skipping = False
        return chunk[cut + 1:] or self._read(CHUNK_BYTES)

    def _lines(self, text: str):
        """The whole lines in decoded `text` (the part before its first newline completes the pending line); what
        follows the last newline waits in `_pending`, cut at MAX_LINE_CHARS."""
        start = 0
        while True:
            newline = text.find("\n", start)
            if newline < 0:
                break
            if self._skipping:
                self._skipping = False
            elif self.collapse_blank and newline == start and not self._pending:
                end = _NEWLINES.match(text, newline).end()
                yield ""
                self.blank_skipped += end - newline - 1
                start = end
                continue
            else:
                piece = text[start:newline]
                if self._pending:
                    piece = "".join(self._pending) + piece
                    self._pending, self._pending_len = [], 0
                if len(piece) > MAX_LINE_CHARS:
                    self.truncated += 1
                    piece = piece[:MAX_LINE_CHARS]
                yield piece
            start = newline + 1
        rest = text[start:]
        if rest and not self._skipping:
            self._pending.append(rest)
            self._pending_len += len(rest)
            if self._pending_len > MAX_LINE_CHARS:
                line = "".join(self._pending)[:MAX_LINE_CHARS]
                self._pending, self._pending_len = [], 0
                self.truncated += 1
                self._skipping = True
                yield line
