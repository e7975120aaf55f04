"""Issue 23's matrix: engine x command x surface. For vLLM, SGLang, llama.cpp and Ollama on one model each,
every command answers (or refuses the same way) through the command line (`--json`, a real subprocess), the
web API (a real local server) and the library, and the three answers are the same JSON."""
from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.web_server import ROOT, cli_env, running_server

import vram_detective
from vram_detective import library
from vram_detective.errors import NotOffered
from vram_detective.render import to_json

CASES = ROOT / "groundtruth"
MODEL = "Qwen/Qwen3-8B"
# one model each: (CLI flags, the same settings by name for the web API and the library)
ENGINES = {
    "vllm": ("H100", ["--max-model-len", "8192"], {"max_model_len": 8192}),
    "sglang": ("H100", ["--context-length", "8192"], {"context_length": 8192}),
    "llamacpp": ("4090", ["--gguf-type", "Q4_K_M", "-c", "8192"], {"gguf_type": "Q4_K_M", "n_ctx": 8192}),
    "ollama": ("4090", ["--gguf-type", "Q4_K_M", "--num-ctx", "8192"], {"gguf_type": "Q4_K_M", "num_ctx": 8192}),
}
# a real log per engine (groundtruth/, each case's `log` holds only the lines the engine printed)
LOGS = {"vllm": ("dev.jsonl", "seed-int4-7b-rtx4090"), "sglang": ("dev-sglang.jsonl", "sglang-qwq32b-4xl4-g6-tp4"),
        "llamacpp": ("dev-llamacpp.jsonl", "llamacpp-glm-z1-32b-iq4xs-3090ti-32k-fa"),
        "ollama": ("dev-llamacpp.jsonl", "llamacpp-ollama-llama31-8b-q4_0-t4-kaggle-8k-np4")}
WORKLOAD = "chat:rate=1,duration=20"


@pytest.fixture(scope="module")
def server():
    with running_server() as (base, _):
        yield base


def cli(*args: str, stdin: str | None = None) -> tuple[int, object, str]:
    done = subprocess.run([sys.executable, "-m", "vram_detective", *args, "--json"], cwd=ROOT, env=cli_env(),
                          input=stdin, capture_output=True, text=True, timeout=300)
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else None, done.stderr.strip()


def api(base: str, path: str, params: dict, body: dict | None = None) -> tuple[int, object]:
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{base}{path}?{query}", data=data,
                                     headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(request, timeout=300) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _args(engine: str) -> tuple[str, list[str], dict]:
    gpu, flags, settings = ENGINES[engine]
    return gpu, [MODEL, "--gpu", gpu, "--engine", engine, *flags], settings


def _without_seconds(value):
    """The fit search's own wall time is the one figure that differs from run to run."""
    if isinstance(value, dict):
        return {k: _without_seconds(v) for k, v in value.items() if k != "seconds"}
    return value


@pytest.mark.parametrize("engine", ENGINES)
def test_explain_is_the_same_on_every_surface(server, engine):
    gpu, args, settings = _args(engine)
    code, out, err = cli("explain", *args)
    status, body = api(server, "/api/explain", {"model": MODEL, "gpu": gpu, "engine": engine, **settings})
    mine = to_json(library.explain(MODEL, gpu, engine=engine, **settings))
    assert (code, err, status) == (0, "", 200)
    assert out == body == json.loads(json.dumps(mine, default=str))
    assert out["schema_version"] == library.SCHEMA_VERSION and out["engine_name"] == engine


@pytest.mark.parametrize("engine", ENGINES)
def test_whatif_is_the_same_on_every_surface(server, engine):
    gpu, args, settings = _args(engine)
    code, out, err = cli("whatif", *args)
    status, body = api(server, "/api/whatif", {"model": MODEL, "gpu": gpu, "engine": engine, **settings})
    mine = library.whatif(MODEL, gpu, engine=engine, **settings).to_dict()
    assert (code, status) == (0, 200), (err, body)
    assert out == body == json.loads(json.dumps(mine, default=str))
    assert (out["schema_version"], out["command"], out["engine"]) == (library.SCHEMA_VERSION, "whatif", engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_fit_is_the_same_on_every_surface_or_refused_the_same_way(server, engine):
    gpu, args, settings = _args(engine)
    code, out, err = cli("fit", *args, "--context", "8k", "--top", "3")
    status, body = api(server, "/api/fit", {"model": MODEL, "gpu": gpu, "engine": engine, "context": "8k",
                                            "top": "3", **settings})
    if engine == "ollama":  # Ollama picks its GPU layers itself: nothing for fit to set, said the same way
        with pytest.raises(NotOffered) as caught:
            library.fit(MODEL, gpu, engine=engine, context="8k", top=3, **settings)
        assert (code, status, out) == (2, 400, None)
        assert err == f"vram-detective: error: {caught.value}" and body == {"error": str(caught.value)}
        return
    mine = library.fit(MODEL, gpu, engine=engine, context="8k", top=3, **settings).to_dict()
    assert (code, status) == (0, 200), (err, body)
    assert _without_seconds(out) == _without_seconds(body) == _without_seconds(json.loads(json.dumps(mine,
                                                                                                      default=str)))
    assert (out["schema_version"], out["command"], out["engine"]) == (library.SCHEMA_VERSION, "fit", engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_simulate_is_the_same_on_every_surface(server, engine):
    gpu, args, settings = _args(engine)
    code, out, err = cli("simulate", *args, "--workload", WORKLOAD)
    status, body = api(server, "/api/simulate", {"model": MODEL, "gpu": gpu, "engine": engine,
                                                 "workload": WORKLOAD, **settings})
    mine = library.simulate(MODEL, gpu, engine=engine, workload=WORKLOAD, **settings).to_dict()
    assert (code, status) == (0, 200), (err, body)
    assert out == body == json.loads(json.dumps(mine, default=str))
    assert out["engine"] == engine and out["result"]["requests"] > 0


def _log(engine: str) -> str:
    name, case_id = LOGS[engine]
    for line in (CASES / name).read_text().splitlines():
        case = json.loads(line)
        if case["id"] == case_id:
            return case["log"]
    raise AssertionError(f"{case_id} not in {name}")


@pytest.mark.parametrize("engine", ENGINES)
def test_logs_are_read_the_same_on_every_surface(server, engine):
    text = _log(engine)
    code, out, err = cli("logs", "-", stdin=text)
    status, body = api(server, "/api/logs", {}, {"log": text})
    mine = library.logs(text).to_dict()
    assert (code, status) == (0, 200), (err, body)
    assert out == body == json.loads(json.dumps(mine, default=str))
    assert out["schema_version"] == library.SCHEMA_VERSION and out["command"] == "logs"


def test_compare_is_the_same_on_every_surface(server):
    code, out, err = cli("compare", MODEL, "--gpu", "4090", "--context", "8k")
    status, body = api(server, "/api/compare", {"model": MODEL, "gpu": "4090", "context": "8k"})
    mine = library.compare(MODEL, "4090", context=8192).to_dict()
    assert (code, status) == (0, 200), (err, body)
    assert out == body == json.loads(json.dumps(mine, default=str))
    assert [e["engine_name"] for e in out["engines"]] == ["vllm", "sglang", "llamacpp"]


def test_compare_names_every_engine_the_same_on_every_surface(server):
    """compare's default set leaves Ollama out; asked for all four, every surface answers the same four."""
    code, out, err = cli("compare", MODEL, "--gpu", "4090", "--context", "8k", "--engines", ",".join(ENGINES))
    status, body = api(server, "/api/compare", {"model": MODEL, "gpu": "4090", "context": "8k",
                                               "engines": ",".join(ENGINES)})
    mine = library.compare(MODEL, "4090", context=8192, engines=tuple(ENGINES)).to_dict()
    assert (code, status) == (0, 200), (err, body)
    assert out == body == json.loads(json.dumps(mine, default=str))
    assert [e["engine_name"] for e in out["engines"]] == list(ENGINES)


def test_speculative_compare_is_the_same_on_every_surface(server):
    """compare --speculative: vLLM and SGLang size the model's MTP layers in their own flags; llama.cpp (draft not
    sized yet) and Ollama (no speculative decoding) are listed with their reasons; CLI, API and library agree."""
    model = "Qwen/Qwen3.5-27B"  # carries one MTP layer (mtp_num_hidden_layers)
    code, out, err = cli("compare", model, "--gpu", "H100", "--context", "32k", "--engines", ",".join(ENGINES),
                         "--speculative", "mtp", "--draft-tokens", "2")
    status, body = api(server, "/api/compare", {"model": model, "gpu": "H100", "context": "32k",
                                               "engines": ",".join(ENGINES), "speculative": "mtp", "draft_tokens": "2"})
    mine = library.compare(model, "H100", context=32768, engines=tuple(ENGINES),
                           speculation={"method": "mtp", "tokens": 2}).to_dict()
    assert (code, status) == (0, 200), (err, body)
    assert out == body == json.loads(json.dumps(mine, default=str))
    assert out["speculation"] == {"method": "mtp", "draft_model": None, "tokens": 2}
    assert [e["engine_name"] for e in out["engines"]] == ["vllm", "sglang"]
    assert [s["engine"] for s in out["skipped"]] == ["llama.cpp", "Ollama"]
    vllm, sglang = out["engines"]
    assert any(c["key"] == "weights.draft" and c["bytes"] > 0 for c in _components(vllm["components"]))
    assert sglang["sglang"]["draft_weights_gib"] > 0
    assert sglang["settings"]["speculative_num_steps"]["value"] == 2
    assert sglang["settings"]["speculative_num_draft_tokens"]["value"] == 3
    plain = cli("compare", model, "--gpu", "H100", "--context", "32k")[1]
    assert sglang["kv_cache_tokens"] < plain["engines"][1]["kv_cache_tokens"]  # the draft's layers cost KV cells


@pytest.mark.parametrize("flags, params", [
    (["--draft-model", "some/draft"], {"draft_model": "some/draft"}),
    (["--speculative", "draft_model"], {"speculative": "draft_model"}),
])
def test_a_speculative_setup_missing_a_part_is_bad_input_everywhere(server, flags, params):
    code, out, err = cli("compare", MODEL, "--gpu", "4090", *flags)
    status, body = api(server, "/api/compare", {"model": MODEL, "gpu": "4090", **params})
    assert (code, status) == (2, 400) and out is None
    assert body["error"] in err and "draft model" in err


def _components(node: dict) -> list:
    return [node] + [inner for child in node.get("children", []) for inner in _components(child)]


def test_the_package_root_is_the_library():
    assert vram_detective.SCHEMA_VERSION == library.SCHEMA_VERSION
    assert (vram_detective.whatif, vram_detective.fit, vram_detective.logs, vram_detective.score) == (
        library.whatif, library.fit, library.logs, library.score)
    assert (ROOT / "src" / "vram_detective" / "py.typed").is_file()
    assert '"py.typed"' in (ROOT / "pyproject.toml").read_text()  # shipped as package data


# a real case per engine that the catalog alone plans (the Ollama runner's case is a llama.cpp-file case)
SCORED = dict(LOGS, vllm=("dev.jsonl", "vllm-10517-llama31-8b-3090-20k"))


def _case_line(engine: str) -> str:
    name, case_id = SCORED[engine]
    return next(line for line in (CASES / name).read_text().splitlines() if json.loads(line)["id"] == case_id)


def api_text(base: str, path: str, text: str) -> tuple[int, object]:
    request = urllib.request.Request(f"{base}{path}", data=text.encode(), headers={"Content-Type": "text/plain"})
    try:
        with urllib.request.urlopen(request, timeout=300) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.parametrize("engine", ENGINES)
def test_score_is_the_same_on_every_surface(server, engine, tmp_path):
    """One real case per engine: `score FILE --catalog-only
    --json`, /api/score with the file's lines as the body (a server reads no file: catalog models only) and the
    library give the same report, and the case is scored (not skipped)."""
    cases = tmp_path / "cases.jsonl"
    cases.write_text(_case_line(engine) + "\n")
    code, out, err = cli("score", str(cases), "--catalog-only")
    status, body = api(server, "/api/score", {}, {"cases": cases.read_text()})
    plain_status, plain = api_text(server, "/api/score", cases.read_text())
    mine = library.score(str(cases), catalog_only=True).to_dict()
    assert (code, err, status, plain_status) == (0, "", 200, 200), body
    assert out == body == plain == json.loads(json.dumps(mine))
    assert out["schema_version"] == library.SCHEMA_VERSION and out["command"] == "score"
    section = out[json.loads(_case_line(engine)).get("engine") or "vllm"]  # every engine's section by its name
    assert (section["cases"], section["scored"]) == (1, 1), section["skipped"]


def test_score_api_reads_no_file_and_names_what_is_missing(server, tmp_path):
    """A case naming a GGUF file on the server's disk is planned from its `quant` (the file is not read: the
    server was not started with --allow-local-models), as the command line plans it when the file is absent;
    an empty body is one line and 400."""
    case = json.loads(_case_line("llamacpp"))
    at_hand = tmp_path / "model.gguf"
    at_hand.write_bytes(b"GGUF")  # not a readable header: reading it would skip the case as unreadable
    body = {"cases": [dict(case, settings=dict(case["settings"], gguf_file=str(at_hand)))]}
    status, report = api(server, "/api/score", {}, body)
    status_plain, without = api(server, "/api/score", {}, {"cases": [case]})
    assert (status, status_plain) == (200, 200)
    assert report["llamacpp"]["per_case"] == without["llamacpp"]["per_case"]
    assert report["llamacpp"]["scored"] == 1
    assert api(server, "/api/score", {}, {"cases": ""}) == (400, {"error": "no cases given (JSONL: one ground-truth "
                                                                  "case a line, groundtruth/SCHEMA.md)"})
