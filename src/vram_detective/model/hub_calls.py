"""One call to the Hugging Face Hub (model/hub.py): the settings read from the environment, the deadline every
call of a fetch shares, retries, and huggingface_hub's errors translated into ours (one line each)."""
from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass

from ..errors import NotFound
from .sources import UnknownModelError


DEFAULT_DEADLINE = 120.0  # seconds for all the Hub calls of one command (VRAM_DETECTIVE_HUB_DEADLINE)


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
