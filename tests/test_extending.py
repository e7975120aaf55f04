"""Adding to the tool touches the files docs/architecture.md lists, and only those: a vLLM release without new
rules (the two names in engines/vllm/releases.py) and a fifth engine that reuses llama.cpp's rules as Ollama does
(its own rule table mapping its versions to llama.cpp builds, its engine object, one registry line). Each is done
here in-process, through the same names the list gives, and restored afterwards."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from vram_detective import api
from vram_detective.cli import main
from vram_detective.engines import ENGINES, get_engine
from vram_detective.engines.base import Releases
from vram_detective.engines.common.rules import ReleaseWindow, Rule, value_at
from vram_detective.engines.vllm import releases as vllm_releases

ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def listed_files(heading: str) -> list[str]:
    """The files a section of docs/architecture.md lists: its numbered items' leading `path`."""
    text = ARCHITECTURE.read_text()
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\d+\. `([^`]+)`", section, re.MULTILINE)


@pytest.fixture
def fresh_registry():
    get_engine.cache_clear()
    yield
    get_engine.cache_clear()


# --- (a) a vLLM release without new rules ------------------------------------------------------------------


def test_the_list_for_a_vllm_release_without_new_rules():
    assert listed_files("Add a vLLM release without new rules") == [
        "src/vram_detective/engines/vllm/releases.py", "README.md"]


def test_a_vllm_release_without_new_rules_needs_only_the_names_in_releases_py(monkeypatch, capsys, fresh_registry):
    """The release after the newest modelled one (0.34.0 while 0.33 is the newest), added as the list says."""
    current = vllm_releases.NEWEST_KNOWN
    added, after = (current[0], current[1] + 1, 0), (current[0], current[1] + 2, 0)
    old_text, new_text, after_text = (".".join(map(str, v)) for v in (current, added, after))
    assert main(["explain", "Qwen/Qwen3-8B", "--gpu", "H100", "--engine-version", new_text]) == 2  # not modelled yet
    capsys.readouterr()
    # the edit the list names: NEWEST_KNOWN and NOTABLE_RELEASES in engines/vllm/releases.py
    monkeypatch.setattr(vllm_releases, "NEWEST_KNOWN", added)
    monkeypatch.setattr(vllm_releases, "NOTABLE_RELEASES", vllm_releases.NOTABLE_RELEASES + (new_text,))

    engine = get_engine("vllm")
    assert engine.releases.newest == new_text and engine.releases.resolve(None) == added
    assert engine.releases.known[-1] == new_text
    new = api.explain("Qwen/Qwen3-8B", "H100", engine_version=new_text, max_model_len=32768)
    old = api.explain("Qwen/Qwen3-8B", "H100", engine_version=old_text, max_model_len=32768)
    assert new.engine_version == new_text and old.engine_version == old_text
    # no new rules: every figure and printed line as the previous release's
    assert (new.weights_bytes, new.kv_cache_bytes, new.kv_cache_tokens, new.log_lines) == (
        old.weights_bytes, old.kv_cache_bytes, old.kv_cache_tokens, old.log_lines)

    assert main(["explain", "Qwen/Qwen3-8B", "--gpu", "H100", "--max-model-len", "32k", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["engine_version"] == new_text and data["kv_cache_tokens"] == old.kv_cache_tokens  # the default
    assert main(["explain", "Qwen/Qwen3-8B", "--gpu", "H100", "--engine-version", after_text]) == 2
    assert f"known releases: 0.3.0 to {added[0]}.{added[1]}.x" in capsys.readouterr().err


# --- (b) a fifth engine on llama.cpp's rules ---------------------------------------------------------------

# its rule table: the defaults it changes by version and the llama.cpp build each version vendors
FAKE_RULES: tuple[Rule, ...] = (
    Rule((1, 0, 0), "llamacpp_build", 5274, "fakecpp 1.0 vendors llama.cpp b5274"),
    Rule((2, 0, 0), "llamacpp_build", 7342, "fakecpp 2.0 vendors llama.cpp b7342"),
)
FAKE_WINDOW = ReleaseWindow("FakeCpp", (1, 0, 0), (2, 0, 0), 2, lambda v: ".".join(map(str, v)))


def _resolve(text: str | None):
    if text in (None, "", "latest", "newest"):
        return FAKE_WINDOW.newest
    return FAKE_WINDOW.check(tuple(int(part) for part in (str(text).split(".") + ["0", "0"])[:3]), str(text))


class FakeCppEngine:
    """engines/fakecpp/engine.py of the list: the interface filled from its own rule table, and llama.cpp's
    engine (through the registry) at the build its version vendors for everything llama.cpp decides."""

    name = "fakecpp"
    label = "FakeCpp"

    def __getattr__(self, part):  # launch, logs, levers, refusals, settings_error: llama.cpp's own
        return getattr(get_engine("llamacpp"), part)

    @property
    def releases(self) -> Releases:
        def rules_at(version, path=None):
            return {"llamacpp_build": value_at(FAKE_RULES, "llamacpp_build", version)}

        return Releases(("1.0.0", "2.0.0"), "1.0.0", "2.0.0", _resolve, rules_at,
                        lambda version, name, path=None, default=None: rules_at(version).get(name, default),
                        lambda test: next((r.since for r in FAKE_RULES if test(rules_at(r.since))), None),
                        FAKE_WINDOW.contains, lambda version, variant="": f"fake {version}")

    @staticmethod
    def _build(version):
        return (value_at(FAKE_RULES, "llamacpp_build", tuple(version)),)

    def resolve_settings(self, user, spec, gpu, version):
        return get_engine("llamacpp").resolve_settings(user, spec, gpu, self._build(version))

    def plan(self, spec, gpu, settings, version, *, gguf_checkpoint=None):
        return get_engine("llamacpp").plan(spec, gpu, settings, self._build(version), gguf_checkpoint=gguf_checkpoint)

    def kv_plan_for_budget(self, spec, gpu, settings, version, kv_budget_bytes):
        return get_engine("llamacpp").kv_plan_for_budget(spec, gpu, settings, self._build(version), kv_budget_bytes)

    def rank_inventories(self, spec, gpu, settings, version):
        return get_engine("llamacpp").rank_inventories(spec, gpu, settings, self._build(version))

    def checkpoint_report(self, spec, gpu, settings, version, checkpoint):
        return get_engine("llamacpp").checkpoint_report(spec, gpu, settings, self._build(version), checkpoint)


FAKE_ENGINE = FakeCppEngine()


def test_the_list_for_a_fifth_engine_on_llamacpps_rules():
    assert listed_files("Add an engine that reuses llama.cpp's rules") == [
        "src/vram_detective/engines/fakecpp/releases.py", "src/vram_detective/engines/fakecpp/engine.py",
        "src/vram_detective/engines/fakecpp/__init__.py", "src/vram_detective/engines/__init__.py",
        "tests/test_fakecpp_engine.py"]


def test_a_fifth_engine_needs_its_rule_table_its_engine_and_one_registry_line(monkeypatch, capsys, fresh_registry):
    monkeypatch.setitem(ENGINES, "fakecpp", f"{__name__}:FAKE_ENGINE")  # the registry line
    engine = get_engine("fakecpp")
    assert engine is FAKE_ENGINE and engine.releases.newest == "2.0.0"
    settings = {"n_ctx": 8192, "n_gpu_layers": 99}
    fake = api.explain("Qwen/Qwen3-8B", "RTX 4090", engine="fakecpp", engine_version="1.0", **settings)
    cpp = api.explain("Qwen/Qwen3-8B", "RTX 4090", engine="llamacpp", engine_version="b5274", **settings)
    assert (fake.weights_bytes, fake.kv_cache_bytes, fake.log_lines) == (cpp.weights_bytes, cpp.kv_cache_bytes,
                                                                         cpp.log_lines)
    assert fake.kv_cache_bytes == 8192 * 36 * 8 * 128 * 2 * 2  # n_ctx x layers x KV heads x head dim x K,V x f16
    with pytest.raises(ValueError, match="newer than the newest modelled release"):
        api.explain("Qwen/Qwen3-8B", "RTX 4090", engine="fakecpp", engine_version="3.0", **settings)

    assert main(["explain", "Qwen/Qwen3-8B", "--gpu", "4090", "--engine", "fakecpp", "--engine-version", "2.0",
                 "-c", "8192", "-ngl", "99", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    newest = api.explain("Qwen/Qwen3-8B", "RTX 4090", engine="llamacpp", engine_version="b7342", **settings)
    assert data["engine_version"] == "b7342"  # llama.cpp's plan at the build 2.0 vendors labels its breakdown
    assert data["kv_cache_tokens"] == newest.kv_cache_tokens == 8192
    # `logs --nvidia-smi` without a log: llama.cpp's reading lever, solved on the fifth engine's own plan
    from vram_detective import library

    # nvidia-smi on a 4090, as quoted in groundtruth/dev.jsonl (vllm-7768-internvl2-8b-2x4090)
    smi = ('|   0  NVIDIA GeForce RTX 4090        On  | 00000000:1E:00.0 Off |                  Off |\n'
           '| 30%   26C    P8              16W / 450W |  14214MiB / 24564MiB |      0%      Default |\n')
    fake_reading = library.logs("", nvidia_smi=smi, model="Qwen/Qwen3-8B", engine="fakecpp", engine_version="2.0").data
    cpp_reading = library.logs("", nvidia_smi=smi, model="Qwen/Qwen3-8B", engine="llamacpp", engine_version="b7342").data
    assert fake_reading["engine"] == "fakecpp" and fake_reading["n_ctx"] == cpp_reading["n_ctx"]
    assert fake_reading["n_ctx"]["where"] == "inside" and fake_reading["used_mib"] == 14214
