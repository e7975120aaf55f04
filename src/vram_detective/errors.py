"""The project's error base and the exit-code policy of the command line.

Exit codes: 0 the engine starts (or the command did its job), 1 the engine would refuse to start (the message
is the engine's own: `EngineRefused`, whatever the engine), 2 bad input (one line on stderr), 3 a bug in this
tool (one line asking for a report, never a bare traceback). Bad input is any project error and the ValueError
/ OSError families the readers raise, and the lookups that name what the user asked for (`NotFound`: an unknown
model, GPU, engine, Ollama tag); anything else escaping a command is a bug, a bare KeyError or IndexError from
inside the tool included. The web API maps the same three kinds to HTTP 422, 400 and 500 (`http_status`)."""
from __future__ import annotations

import sys

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_BAD_INPUT = 2
EXIT_BUG = 3
MAX_MESSAGE_CHARS = 400  # one line, even when a message quotes a hostile value


class VramDetectiveError(Exception):
    """Base of the errors this project raises on purpose."""


class BadInput(VramDetectiveError, ValueError):
    """A value the user gave that no engine would take (exit 2)."""


class NotFound(VramDetectiveError, LookupError):
    """Something the user named that is not there (a model, a GPU, an engine, an Ollama tag): bad input (exit 2),
    unlike a lookup failing inside the tool (a bug, exit 3)."""


class EngineRefused(Exception):
    """The engine itself would not start with these settings (exit 1, HTTP 422), in the engine's own words.
    Every engine's refusal derives from it (engines/<engine>/settings.py or plan.py), naming the engine."""

    engine_label = "the engine"  # each engine's subclass names itself ("vLLM", "SGLang", "llama.cpp")

    def sentence(self) -> str:
        return f"{self.engine_label} would refuse to start: {one_line(self)}"


class NotOffered(VramDetectiveError):
    """The engine has no such thing (a feature another engine has): said the same way on every surface (exit 2,
    HTTP 400), never a silent default."""


REFUSED, BAD_INPUT, BUG = "refused", "bad input", "bug"
BAD_INPUT_ERRORS: tuple[type[BaseException], ...] = (VramDetectiveError, ValueError, NotFound, OSError)


def kind(error: BaseException) -> str:
    """REFUSED, BAD_INPUT or BUG: the one classification every front end (CLI, web API, library callers) uses."""
    if isinstance(error, EngineRefused):
        return REFUSED
    if isinstance(error, RecursionError):  # a RuntimeError: deeply nested input that a reader did not bound
        return BUG
    if isinstance(error, LookupError) and not isinstance(error, NotFound):
        return BUG  # a KeyError / IndexError from inside the tool: never "bad input"
    if isinstance(error, BAD_INPUT_ERRORS):
        return BAD_INPUT
    return BUG


EXIT_CODES = {REFUSED: 1, BAD_INPUT: 2, BUG: 3}
HTTP_STATUS = {REFUSED: 422, BAD_INPUT: 400, BUG: 500}


def exit_code(error: BaseException) -> int:
    return EXIT_CODES[kind(error)]


def http_status(error: BaseException) -> int:
    return HTTP_STATUS[kind(error)]


def message(error: BaseException) -> str:
    """The one-line text a front end shows for `error` (a refusal names its engine)."""
    if isinstance(error, EngineRefused):
        return error.sentence()
    if kind(error) == BUG:
        return f"internal error ({type(error).__name__}: {one_line(error)})"
    return one_line(error)


def one_line(error: BaseException) -> str:
    """The first non-empty line of the message, capped."""
    text = str(error).strip()
    line = text.splitlines()[0] if text else type(error).__name__
    return line if len(line) <= MAX_MESSAGE_CHARS else line[:MAX_MESSAGE_CHARS - 1] + "…"


def report_bad_input(error: BaseException, stream=None) -> int:
    print(f"vram-detective: error: {one_line(error)}", file=stream or sys.stderr)
    return EXIT_BAD_INPUT


def report_refusal(error: EngineRefused, stream=None) -> int:
    print(error.sentence(), file=stream or sys.stderr)
    return EXIT_REFUSED


def report(error: BaseException, stream=None) -> int:
    """One line on stderr for `error` under the policy; returns the exit code."""
    return {REFUSED: report_refusal, BAD_INPUT: report_bad_input, BUG: report_bug}[kind(error)](error, stream)


def report_bug(error: BaseException, stream=None) -> int:
    print(f"vram-detective: internal error ({type(error).__name__}: {one_line(error)}); "
          "please report this with the command line that caused it", file=stream or sys.stderr)
    return EXIT_BUG


def run_guarded(main, argv=None) -> int:
    """main(argv) under the exit-code policy: nothing but one line on stderr ever leaves it."""
    try:
        return main(argv)
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:
        print("vram-detective: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - the policy: one line and its exit code, never a traceback
        return report(error)
