"""The flags of a pasted launch line the prediction does not read: a misspelling of a flag the engine has is bad
input (the engine itself would exit at once on it), anything else is listed as ignored. One rule for every
engine, the command line and the web page."""
from __future__ import annotations

import difflib

from .errors import BadInput

# how close a name must be to one of the engine's flags to be read as its misspelling
TYPO_CUTOFF = 0.85


def ignored_notes(engine_name: str, ignored) -> list[str]:
    """The note listing the flags left out; BadInput naming the flag meant when one is a misspelling."""
    from .engines import get_engine

    engine = get_engine(engine_name)
    known = [name for flag in engine.launch.flags for name in flag.names if name.startswith("--")]
    typos, skipped = [], []
    for word in dict.fromkeys(ignored):
        name = word.split("=", 1)[0]
        near = difflib.get_close_matches(name, known, n=1, cutoff=TYPO_CUTOFF) if name.startswith("--") else []
        (typos.append(f"{name} (did you mean {near[0]}?)") if near else skipped.append(word))
    if typos:
        raise BadInput(f"unknown flag{'s' if len(typos) > 1 else ''} in the launch line: {', '.join(typos)}; "
                       f"{engine.label} would exit at once on {'them' if len(typos) > 1 else 'it'}")
    return [f"ignored (no effect on memory, or not modelled): {', '.join(skipped)}"] if skipped else []
