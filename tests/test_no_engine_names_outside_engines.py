"""Issue 23: outside engines/, no engine is named in code (the default in engines.DEFAULT_ENGINE aside) and no
optional engine hook is probed with getattr/hasattr: every front end goes through the interface.

The whole tree is there (the per-file ratchet that held the counts on the way, from 62 names and 3 probes, is
gone with them); the front ends rebuilt on the interface are also checked by name, so a regression there says
which file."""
from __future__ import annotations

import re
from pathlib import Path

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


def test_no_engine_name_and_no_hook_probe_outside_engines():
    files = _outside_engines()
    assert _hits(NAMES, files) == []
    assert _hits(PROBES, files) == []


# The grep above catches the usual spellings of a branch; this catches any engine named as a value in code (a
# default, a key, a label), docstrings aside. None is left: the last one (forensics/reading.py, an nvidia-smi
# reading with no log solved for vLLM's gpu_memory_utilization only) asks the engine for its lever now
# (engines/base.py ReadingLever).
ENGINE_WORDS = {"vllm", "sglang", "llamacpp", "llama.cpp", "llama-cpp", "ollama"}
NAMED_AS_VALUE_LEFT: dict[str, int] = {}


def _named_as_values(path: Path) -> int:
    import ast

    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return sum(1 for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
               and node.value.lower() in ENGINE_WORDS and id(node) not in docstrings)


def test_the_value_check_finds_what_it_looks_for(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('"""Names vllm in prose."""\ndef f(engine="vllm"):\n    """sglang"""\n    return {"SGLang": 1}\n')
    assert _named_as_values(probe) == 2


def test_no_engine_named_as_a_value_outside_engines():
    counts = {str(path.relative_to(SRC)): _named_as_values(path) for path in _outside_engines()}
    assert {name: n for name, n in counts.items() if n} == NAMED_AS_VALUE_LEFT
