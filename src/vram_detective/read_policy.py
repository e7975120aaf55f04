"""What local files the process may read: everything on the command line; on the web server (`serve`) only what
lies under --allow-local-models (and the Hub cache the tool writes itself).

Every reader of a path a user (or a pasted log, launch line or manifest) names asks here first: the model
directory and GGUF readers (model/sources.py), every file open (units.open_regular_file), the llama.cpp
projector (--mmproj), the Ollama store, traces. A path is resolved (symlinks followed) before it is compared,
so a link inside the allowed directory that points outside is refused too, and the refusal is one message
whatever the path is (missing, a directory, unreadable or present), naming neither the path's target nor the
allowed directory."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import BadInput

NOT_ALLOWED = "not readable here: this server reads local models only under the directory it was started with " \
              "(--allow-local-models)"


class NotAllowed(BadInput):
    """A path outside what this process may read (HTTP 403 on the server)."""


@dataclass(frozen=True)
class ReadPolicy:
    """`roots` None: any path (the CLI); else only paths that resolve inside one of `roots`."""

    roots: tuple[str, ...] | None = None

    def allows(self, path) -> bool:
        if self.roots is None:
            return True
        try:
            resolved = os.path.realpath(os.fspath(path))
        except (OSError, ValueError, TypeError):
            return False
        return any(resolved == root or resolved.startswith(root.rstrip(os.sep) + os.sep) for root in self.roots)

    @property
    def restricted(self) -> bool:
        return self.roots is not None


_policy = ReadPolicy()


def install(policy: ReadPolicy) -> None:
    """Set the process's policy (`serve` does, once, before answering requests)."""
    global _policy
    _policy = policy


def current() -> ReadPolicy:
    return _policy


def server_policy(local_root: str | os.PathLike | None, extra: tuple[str, ...] = ()) -> ReadPolicy:
    """The web server's policy: `local_root` (may be None: no local model) and `extra` (the Hub cache)."""
    roots = [os.path.realpath(path) for path in extra if path]
    if local_root:
        roots.append(os.path.realpath(os.fspath(local_root)))
    return ReadPolicy(tuple(roots))


def check(path, what: str = "") -> None:
    """Raise NotAllowed when the policy does not allow reading `path` (one message, whatever the path is)."""
    if not _policy.allows(path):
        raise NotAllowed(f"{str(what)[:200]}: {NOT_ALLOWED}" if what else NOT_ALLOWED)


def may_probe(path) -> bool:
    """Whether a reader may even look at `path` (exists, is_dir): never outside the policy, so that answers do
    not tell which paths exist."""
    return _policy.allows(path)


def exists(path) -> bool:
    """path.exists() where the policy lets a reader look, False elsewhere; a name the file system cannot hold
    (too long, a loop of links) does not exist rather than raising."""
    if not _policy.allows(path):
        return False
    try:
        return os.path.exists(os.fspath(path))
    except (OSError, ValueError):
        return False
