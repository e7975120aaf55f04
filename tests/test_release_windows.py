"""Every engine's release resolver knows its newest modelled release, in the library as on the command line:
a later release is refused (a ValueError naming the window), never planned with the newest rules under its name."""
from __future__ import annotations

import pytest

from vram_detective import api
from vram_detective.engines import get_engine
from vram_detective.engines.common.rules import ReleaseWindow, Rule, UnsupportedReleaseError, rows_in_force, until


@pytest.mark.parametrize("engine, release, newest", [
    ("vllm", "0.99.0", r"0\.\d+\.x"),  # the window's line, whichever release is the newest
    ("sglang", "0.9.0", "0.5.23"),
    ("sglang", "0.5.24", "0.5.23"),
    ("ollama", "0.99", "0.32.13"),
    ("llamacpp", "b99999", r"b\d+"),  # the newest build read (llama.cpp's NEWEST_BUILD)
])
def test_a_release_after_the_newest_is_refused_by_the_resolver(engine, release, newest):
    with pytest.raises(UnsupportedReleaseError, match=f"newer than the newest modelled release .*to {newest}"):
        get_engine(engine).releases.resolve(release)
    assert issubclass(UnsupportedReleaseError, ValueError)


@pytest.mark.parametrize("engine, release, model", [
    ("sglang", "0.9.0", "Qwen/Qwen3-8B"),
    ("ollama", "0.99", "Qwen/Qwen3-8B"),
    ("llamacpp", "b99999", "Qwen/Qwen3-8B"),
])
def test_the_library_refuses_it_too(engine, release, model):
    """SGLang 0.9.0, Ollama 0.99 and llama.cpp b99999 were planned with the newest rules under their own name."""
    with pytest.raises(ValueError, match="newer than the newest modelled release"):
        api.explain(model, "H100", engine=engine, engine_version=release)


@pytest.mark.parametrize("engine, release, resolved", [
    ("vllm", "0.33.1", (0, 33, 1)),  # a patch of the newest line: that line's rules
    ("sglang", "0.5.23", (0, 5, 23)),
    ("ollama", "0.32.13", (0, 32, 13)),
    ("ollama", "0.6.8", (0, 6, 8)),
    ("llamacpp", "b3000", (3000,)),
    ("llamacpp", "b7342", (7342,)),
])
def test_the_newest_modelled_release_itself_resolves(engine, release, resolved):
    assert get_engine(engine).releases.resolve(release) == resolved


def test_rows_hold_until_the_next_row_of_their_rule_and_path():
    rows = (Rule((0, 0, 0), "mode", "a", "f.py 0.1"), Rule((0, 5, 0), "mode", "b", "f.py 0.5", path="v1"),
            Rule((0, 7, 0), "mode", "c", "f.py 0.7"))
    assert rows_in_force(rows, (0, 6, 0), "v1")["mode"].value == "b"
    assert rows_in_force(rows, (0, 6, 0), "v0")["mode"].value == "a"
    assert rows_in_force(rows, (0, 7, 0), "v1")["mode"].value == "c"
    assert until(rows, rows[0]) == (0, 7, 0) and until(rows, rows[1]) == (0, 7, 0) and until(rows, rows[2]) is None
    window = ReleaseWindow("X", (0, 1, 0), (0, 7, 2), 2, lambda v: ".".join(map(str, v)))
    assert window.check((0, 7, 9)) == (0, 7, 9) and window.newest_line == "0.7.x"
    assert not window.contains((0, 8, 0)) and not window.contains((0, 0, 9))
