"""Issue 23: outside engines/, no engine is named in code (the default in engines.DEFAULT_ENGINE aside) and no
optional engine hook is probed with getattr/hasattr: every front end goes through the interface.

The whole tree is not there yet: the strict xfail below holds the observed counts (it fails the day they reach
0, so the marker goes then); the front ends rebuilt on the interface (CLI dispatch, the web API, the library,
the advisor dispatch, engine choice, refusals) are held at 0 now."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "vram_detective"
NAMES = re.compile(r"""get_engine\(\s*["'](vllm|sglang|llamacpp|ollama)["']|[!=]=\s*["'](vllm|sglang|llamacpp|ollama)["']""")
PROBES = re.compile(r"""(?:getattr|hasattr)\(\s*(?:engine|runner|get_engine\([^)]*\))\s*,""")
FRONT_ENDS = ("cli.py", "api.py", "library.py", "engine_choice.py", "errors.py", "compare.py", "web/app.py",
              "advisor/command.py", "advisor/answers.py", "simulate/command.py")


def _hits(pattern: re.Pattern, files) -> list[str]:
    found = []
    for path in files:
        text = path.read_text()
        found += [f"{path.name}:{text[:m.start()].count(chr(10)) + 1}: {m.group(0)}"
                  for m in pattern.finditer(text)]
    return found


def _outside_engines() -> list[Path]:
    return [path for path in sorted(SRC.rglob("*.py")) if "engines" not in path.relative_to(SRC).parts]


def test_the_pattern_finds_what_it_looks_for(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('if name == "sglang": get_engine("vllm")\nhook = getattr(engine, "resolve_model", None)\n')
    assert len(_hits(NAMES, [probe])) == 2 and len(_hits(PROBES, [probe])) == 1


def test_the_rebuilt_front_ends_name_no_engine_and_probe_no_hook():
    files = [SRC / name for name in FRONT_ENDS]
    assert _hits(NAMES, files) == []
    assert _hits(PROBES, files) == []


@pytest.mark.xfail(strict=True, reason="observed 47 engine-name matches outside engines/ ("
                                       "forensics/ 18, advisor/search.py and levers.py 7, simulate/ 12, "
                                       "web/service.py 2, ...) and 3 getattr/hasattr probes "
                                       "(watch/command.py, deploy/command.py, forensics/engine_logs.py)")
def test_no_engine_name_and_no_hook_probe_outside_engines():
    files = _outside_engines()
    assert (len(_hits(NAMES, files)), len(_hits(PROBES, files))) == (0, 0)


# The ratchet until the strict xfail above turns: per file, at most what was observed (one line per file, so work
# on different files lands without touching the same line). Lower a count, or delete its line, when a file gets
# rid of its branches; never raise one.
NAME_BUDGET = {
    "advisor/gguf_advisor.py": 3,
    "advisor/launch_command.py": 3,
    "advisor/levers.py": 2,
    "advisor/search.py": 5,
    "advisor/sglang_advisor.py": 1,
}
PROBE_BUDGET = {
}


def _over_budget(pattern: re.Pattern, budget: dict[str, int]) -> dict[str, int]:
    counts = {str(path.relative_to(SRC)): len(_hits(pattern, [path])) for path in _outside_engines()}
    return {name: n for name, n in counts.items() if n > budget.get(name, 0)}


def test_the_count_does_not_grow():
    assert _over_budget(NAMES, NAME_BUDGET) == {}
    assert _over_budget(PROBES, PROBE_BUDGET) == {}
