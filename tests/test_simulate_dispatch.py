"""simulate reaches every engine through engines/base.py's PoolSimulation: the pool a prediction pre-allocates,
the scheduler's simulator, its rule table, the lever of `fit --workload`. Ollama runs llama.cpp's slots with its
own settings; an engine without a simulator is answered with NotOffered, the same words on every surface."""
from __future__ import annotations

import contextlib
import io
import json
import re
from dataclasses import replace

import pytest

from vram_detective import api, library
from vram_detective.cli import main
from vram_detective.engines import ENGINES, get_engine
from vram_detective.engines.base import PoolSimulation
from vram_detective.errors import NotOffered
from vram_detective.simulate import CostModel, Request, Workload, pool_from_breakdown, simulate
from vram_detective.simulate.fit import fit_pool
from vram_detective.simulate.rules import rules_for
from vram_detective.simulate.verdict import flags_for_bytes
from vram_detective.web.report import simulate_fragment

MODEL, GPU = "Qwen/Qwen2.5-7B-Instruct", "L4"
STEP = CostModel(decode_step_s=1.0, per_seq_s=0.0, prefill_tokens_per_s=1e12)


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_engine_offers_a_pool_simulation(engine):
    assert isinstance(get_engine(engine).simulation, PoolSimulation)


def test_ollama_pool_is_num_parallel_slots_of_num_ctx_cells():
    b = api.explain(MODEL, GPU, engine="ollama", engine_version="0.32.13", num_ctx=4096, num_parallel=4)
    pool = pool_from_breakdown(b)
    # the cache holds num_ctx x num_parallel cells; each request's slot is num_ctx of them, never the whole cache
    assert (pool.engine, pool.num_blocks, pool.max_num_seqs, pool.max_model_len) == ("ollama", 16384, 4, 4096)
    assert (pool.block_size, pool.unified_kv, pool.context_shift, pool.max_num_batched_tokens) == (1, False, True, 512)
    assert pool.block_bytes == b.kv_bytes_per_token == 57344  # 28 layers x 4 KV heads x 128 x K,V x f16
    # the scheduler rules are llama.cpp's, at the build Ollama 0.32 vendors
    rules = rules_for(pool)
    assert (rules.engine, rules.preemption, rules.victim) == ("llamacpp", "none", "none")


def test_ollama_requests_meet_llamacpps_slots():
    """The same cells and slots give the same run as llama.cpp -c 16384 -np 4 (the llama.cpp server Ollama runs):
    a 5,000-token prompt is truncated to its 4,096-cell slot, a 4,000-token one shifts once its slot is full."""
    ollama = pool_from_breakdown(api.explain(MODEL, GPU, engine="ollama", num_ctx=4096, num_parallel=4))
    work = Workload("trace", trace=(Request(0.0, 5000, 10), Request(0.0, 4000, 200), Request(0.0, 100, 50)),
                    duration=10.0)
    result = simulate(ollama, work, cost=STEP)
    assert [(p.request, p.mode) for p in result.preemption_log] == [
        (1, "prompt truncated"), (1, "context shift"), (2, "context shift")]
    assert (result.finished, result.peak_running, result.requests) == (3, 3, 3)
    cpp = pool_from_breakdown(api.explain(MODEL, GPU, engine="llamacpp", n_ctx=16384, n_parallel=4))
    assert (cpp.num_blocks, cpp.max_model_len, cpp.max_num_seqs) == (16384, 4096, 4)
    same = simulate(cpp, work, cost=STEP)
    assert (same.preemption_log, same.peak_blocks, same.finished) == (result.preemption_log, result.peak_blocks, 3)


def test_ollama_fit_sets_num_ctx_at_the_given_num_parallel():
    def predict(extra):
        return api.explain(MODEL, GPU, engine="ollama", num_parallel=2, **{"num_ctx": 2048, **extra})

    # two long conversations at once: 2 x 2,048 cells is too small, the fit asks for a larger num_ctx
    work = Workload("trace", trace=tuple(Request(0.0, 3000, 100) for _ in range(2)), duration=10.0)
    fit = fit_pool(predict, work, pinned={"num_parallel": 2}, cost=STEP)
    assert (fit.lever.setting, fit.lever.flag) == ("num_ctx", "PARAMETER num_ctx")
    assert fit.feasible and fit.value == 3328  # 3,100 tokens a request, in steps of 256
    assert pool_from_breakdown(fit.breakdown).num_blocks == 2 * 3328
    assert fit.result.preemptions == 0
    assert flags_for_bytes(predict({}), 2 * 3328 * 57344) == {"num_ctx": 3328}


# --- an engine without a simulator: NotOffered, the same words on every surface ------------------------------

class NoSimulatorEngine:
    """llama.cpp's engine without a pool simulation (a fifth engine that has none)."""

    name, label, simulation = "nosim", "NoSim", None

    def __getattr__(self, part):
        return getattr(get_engine("llamacpp"), part)

    def plan(self, spec, gpu, settings, version, *, gguf_checkpoint=None):
        b = get_engine("llamacpp").plan(spec, gpu, settings, version, gguf_checkpoint=gguf_checkpoint)
        return replace(b, engine_name=self.name, engine_label=self.label)


NO_SIMULATOR = NoSimulatorEngine()
WORDS = "simulate: NoSim's scheduler is not modelled (no pool simulator for it)"


@pytest.fixture
def no_simulator(monkeypatch):
    get_engine.cache_clear()
    monkeypatch.setitem(ENGINES, "nosim", f"{__name__}:NO_SIMULATOR")
    yield
    get_engine.cache_clear()


def test_an_engine_without_a_simulator_is_not_offered_alike_in_the_library_and_the_cli(no_simulator, capsys):
    with pytest.raises(NotOffered) as caught:
        library.simulate(MODEL, GPU, engine="nosim", workload="chat:rate=1,duration=5", n_ctx=4096)
    assert str(caught.value) == WORDS
    code = main(["simulate", MODEL, "--gpu", GPU, "--engine", "nosim", "-c", "4096",
                 "--workload", "chat:rate=1,duration=5", "--json"])
    out = capsys.readouterr()
    assert (code, out.out, out.err.strip()) == (2, "", f"vram-detective: error: {WORDS}")



def test_the_engines_shortfall_words_reach_the_json(capsys):
    """llama.cpp preempts nothing: its verdict says a slot overflowed; vLLM's says preempted."""
    assert main(["simulate", MODEL, "--gpu", GPU, "--engine", "llamacpp", "-np", "4", "-c", "8192",
                 "--workload", "rag:rate=2,duration=30", "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)["verdict"]
    assert "overflow their slot (context shifted or prompt truncated)" in verdict and "preempt" not in verdict


def _report(engine: str, *flags: str) -> tuple[dict, str]:
    out = {}
    for fmt in ("--json", None):
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            assert main(["simulate", MODEL, "--gpu", GPU, "--engine", engine, *flags,
                         "--workload", "rag:rate=2,duration=30", *([fmt] if fmt else [])]) == 0
        out[fmt] = buffer.getvalue()
    return json.loads(out["--json"]), out[None]


def test_llamacpp_speaks_of_slot_overflows_on_every_surface():
    report, text = _report("llamacpp", "-np", "4", "-c", "8192")
    assert report["result"]["preemptions"] > 0  # the JSON keys stay; the words are the engine's
    assert "slot overflows  " in text and "slot overflow(s)" in text and "preempt" not in text
    html = simulate_fragment(report)
    assert ">slot overflows<" in html and ">requests overflowing their slot<" in html and "a slot overflow" in html
    assert "preempt" not in re.sub(r"<[^>]*>", " ", html)  # the words shown (the JSON keys stay as attributes)


def test_vllm_still_speaks_of_preemptions():
    report, text = _report("vllm", "--engine-version", "0.11.0", "--max-model-len", "8192",
                           "--num-gpu-blocks-override", "600")
    assert report["result"]["preemptions"] > 0
    assert "are preempted" in report["verdict"] and "preemptions     " in text
    assert ">preemptions<" in simulate_fragment(report)
