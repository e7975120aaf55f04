"""The project's error base and the exit-code policy of the command line.

Exit codes: 0 the engine starts (or the command did its job), 1 the engine would refuse to start (the message
is the engine's own), 2 bad input (one line on stderr), 3 a bug in this tool (one line asking for a report,
never a bare traceback). Bad input is any project error and the ValueError / LookupError / OSError families
the readers raise; anything else escaping a command is a bug."""
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


BAD_INPUT_ERRORS: tuple[type[BaseException], ...] = (VramDetectiveError, ValueError, LookupError, OSError)


def one_line(error: BaseException) -> str:
    """The first non-empty line of the message, capped; a KeyError names the missing field."""
    if isinstance(error, KeyError) and error.args:
        return f"missing field {error.args[0]!r}"[:MAX_MESSAGE_CHARS]
    text = str(error).strip()
    line = text.splitlines()[0] if text else type(error).__name__
    return line if len(line) <= MAX_MESSAGE_CHARS else line[:MAX_MESSAGE_CHARS - 1] + "…"


def report_bad_input(error: BaseException, stream=None) -> int:
    print(f"vram-detective: error: {one_line(error)}", file=stream or sys.stderr)
    return EXIT_BAD_INPUT


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
    except RecursionError as error:  # a RuntimeError: deeply nested input that a reader did not bound
        return report_bug(error)
    except BAD_INPUT_ERRORS as error:
        return report_bad_input(error)
    except Exception as error:  # noqa: BLE001 - the policy: a bug is one line and exit 3, never a traceback
        return report_bug(error)
