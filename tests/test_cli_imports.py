"""A command imports what it uses: the command line builds the named command's parser only, so `explain`
never loads the simulator, the advisor, the web page, the log forensics or `watch` (issue 28); --help
still lists every command with the summary its module registers."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

OTHER_COMMANDS = ("vram_detective.simulate", "vram_detective.advisor", "vram_detective.web",
                  "vram_detective.forensics", "vram_detective.watch", "vram_detective.compare")
ENGINE_NAMES = ("vllm", "sglang", "llamacpp", "ollama")


# Runs the command as `python -m vram_detective` does and writes the names in sys.modules at exit (the engine
# registry imports with importlib, which `-X importtime` does not list).
_RUN = ("import atexit, runpy, sys\n"
        "listing = sys.argv.pop(1)\n"
        "atexit.register(lambda: open(listing, 'w').write('\\n'.join(sorted(sys.modules))))\n"
        "sys.argv[0] = 'vram-detective'\n"
        "runpy.run_module('vram_detective', run_name='__main__', alter_sys=True)\n")


def _imported(*words: str, tmp_path) -> tuple[list[str], str]:
    """The modules a real `python -m vram_detective WORDS` had imported when it exited, and its output."""
    listing = tmp_path / "modules.txt"
    run = subprocess.run([sys.executable, "-c", _RUN, str(listing), *words], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="100"), timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return listing.read_text().split(), run.stdout


def _loaded(names: list[str], packages: tuple[str, ...]) -> list[str]:
    return [name for name in names if name in packages or name.startswith(tuple(p + "." for p in packages))]


@pytest.mark.parametrize("words", [
    ("explain", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090", "--max-model-len", "32k"),
    ("explain", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090", "--max-model-len", "32k", "--json"),
    ("explain", "--gpu", "4090", "--", "vllm", "serve", "Qwen/Qwen3-8B", "--max-num-seqs", "64"),
    ("explain", "Qwen/Qwen3-8B", "--gpu", "4090", "--engine", "sglang"),
], ids=["text", "json", "launch-line", "sglang"])
def test_explain_imports_no_other_command(words, tmp_path):
    names, out = _imported(*words, tmp_path=tmp_path)
    assert "vram_detective.api" in names and out.strip()  # it did answer, through the library
    assert _loaded(names, OTHER_COMMANDS) == []
    # --emit is offered from deploy/__init__.py; the files it lays out load only when it is given
    assert _loaded(names, ("vram_detective.deploy.command", "vram_detective.deploy.files")) == []


# the intervals group a release by its era, which the engine's release table answers (Releases.era): `explain`
# has no use for the case scorer (scoring.py and each engine's engines/<engine>/scoring.py, accuracy.py)
SCORER = ("vram_detective.scoring", *(f"vram_detective.engines.{name}.{part}" for name in ENGINE_NAMES
                                      for part in ("scoring", "accuracy")))


@pytest.mark.parametrize("engine,words", [
    ("vllm", ("--max-model-len", "8k")), ("sglang", ()), ("llamacpp", ("-c", "4096")), ("ollama", ()),
])
def test_explain_does_not_load_the_case_scorer(engine, words, tmp_path):
    names, out = _imported("explain", "Qwen/Qwen3-8B", "--gpu", "4090", "--engine", engine, "--json", *words,
                           tmp_path=tmp_path)
    assert json.loads(out)["model"] == "Qwen/Qwen3-8B"  # it answered (with its intervals where the engine has them)
    assert _loaded(names, SCORER) == []


def test_models_imports_no_engine_plan(tmp_path):
    names, out = _imported("models", "llama", tmp_path=tmp_path)
    assert "meta-llama/Llama-3.1-8B-Instruct" in out
    assert _loaded(names, OTHER_COMMANDS + ("vram_detective.api", "vram_detective.engines.vllm.plan")) == []


def test_logs_builds_only_its_parser(tmp_path):
    names, _ = _imported("logs", "--help", tmp_path=tmp_path)
    assert "vram_detective.forensics.command" in names
    assert _loaded(names, ("vram_detective.simulate", "vram_detective.advisor", "vram_detective.web")) == []


def test_help_lists_every_command_as_its_module_registers_it():
    """The top-level --help from the summaries in cli.COMMANDS is the --help of a parser with every command's
    own parser built (each module's register())."""
    from vram_detective import cli

    lazy, full = cli.build_parser(()), cli.build_parser()
    assert lazy.format_help() == full.format_help()
    assert "simulate  run a request workload" in " ".join(lazy.format_help().split("\n"))
    named = [action for action in full._subparsers._group_actions][0]
    assert list(named.choices) == [name for name, _, _ in cli.COMMANDS]
    registered = {action.dest: action.help for action in named._choices_actions}
    assert registered == {name: summary for name, _, summary in cli.COMMANDS}


@pytest.mark.parametrize("command", ["explain", "whatif", "fit", "simulate", "logs", "compare", "score"])
def test_each_command_help_is_the_full_parsers(command):
    """`CMD --help` built alone is the same text as with every command built."""
    from vram_detective import cli

    alone = cli.build_parser((command,))._subparsers._group_actions[0].choices[command]
    full = cli.build_parser()._subparsers._group_actions[0].choices[command]
    assert alone.format_help() == full.format_help()
    assert "--help" in alone.format_help() and len(alone._actions) == len(full._actions) > 3
