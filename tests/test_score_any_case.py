"""`score` on files it was not prepared for: bad lines and cases among good ones, models beyond the catalog."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from vram_detective.cli import main

ROOT = Path(__file__).resolve().parents[1]
GT = ROOT / "groundtruth"


def _case(file: str, case_id: str) -> dict:
    for line in (GT / file).read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        if case["id"] == case_id:
            return case
    raise KeyError(case_id)


def test_one_bad_case_or_line_never_aborts_the_file(tmp_path, capsys):
    good_vllm = _case("dev.jsonl", "vllm-10517-llama31-8b-3090-20k")
    good_sglang = _case("dev-sglang.jsonl", "sglang-qwen3-06b-rtx5080-mineru")
    good_llamacpp = _case("dev-llamacpp.jsonl", "llamacpp-glm-z1-32b-iq4xs-3090ti-32k-fa")
    old_release = dict(good_sglang, id="too-old", engine_version="0.2.1")
    unknown_gpu = dict(good_vllm, id="unknown-gpu", gpu="NVIDIA Imaginary 9000", observed={"weights_gib": 14.99})
    lines = [json.dumps(good_vllm), json.dumps(old_release), '{"id": "broken", "engine": ', json.dumps(unknown_gpu),
             json.dumps(good_sglang), "[1, 2]", json.dumps(good_llamacpp)]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert main(["score", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [c["id"] for c in report["vllm"]["per_case"]] == [good_vllm["id"]]
    assert [c["id"] for c in report["sglang"]["per_case"]] == [good_sglang["id"]]
    assert [c["id"] for c in report["llamacpp"]["per_case"]] == [good_llamacpp["id"]]
    skipped = {s["id"]: s["reason"] for s in report["vllm"]["skipped"] + report["sglang"]["skipped"]}
    assert skipped["unknown-gpu"] == "unknown GPU 'NVIDIA Imaginary 9000' (not in the GPU table, no logged total)"
    assert skipped["too-old"].startswith("cannot predict:") and "0.2.1" in skipped["too-old"]
    assert report["unreadable_lines"] == [
        {"line": 3, "reason": "not valid JSON (Expecting value)", "file": str(path)},
        {"line": 6, "reason": "not a case (a JSON object with an `id`)", "file": str(path)}]
    # the text report lists them too, and still exits 0
    assert main(["score", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{path}:3: not valid JSON" in out and "1 x unknown GPU 'NVIDIA Imaginary 9000'" in out


def test_a_model_only_in_the_local_hf_cache_as_config_json(tmp_path):
    """HF_HUB_OFFLINE=1 and a cache holding only config.json: the weights are sized from the config as the
    catalog sizes Qwen/Qwen2.5-7B-Instruct (the same config.json), and the row says so."""
    snapshot = tmp_path / "hf" / "hub" / "models--acme--Private-7B" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    shutil.copyfile(GT / "models" / "Qwen--Qwen2.5-7B-Instruct" / "config.json", snapshot / "config.json")
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0123abcd")
    real = _case("dev.jsonl", "file53128951888-qwen25-7b-fp16-sm70-v0180-eager")  # logged 14.25 GiB of weights
    private = dict(real, id="private-7b", model="acme/Private-7B")
    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps(real) + "\n" + json.dumps(private) + "\n")
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT / "src"))
    env.pop("HF_HUB_CACHE", None)
    run = subprocess.run([sys.executable, "-m", "vram_detective", "score", str(path), "--json"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    rows = {c["id"]: c for c in json.loads(run.stdout)["vllm"]["per_case"]}
    assert rows["private-7b"]["figures"]["weights_gib"]["observed"] == 14.25
    assert rows["private-7b"]["figures"]["weights_gib"]["predicted"] == rows[real["id"]]["figures"]["weights_gib"]["predicted"]
    assert rows["private-7b"]["figures"]["weights_gib"]["rel_err"] < 0.001
    assert "weights sized from config.json" in rows["private-7b"]["model_note"]
    assert "model_note" not in rows[real["id"]]
    # --catalog-only: the same case is skipped, with why
    run = subprocess.run([sys.executable, "-m", "vram_detective", "score", str(path), "--json", "--catalog-only"],
                         env=env, capture_output=True, text=True, timeout=300)
    skipped = {s["id"]: s["reason"] for s in json.loads(run.stdout)["vllm"]["skipped"]}
    assert skipped == {"private-7b": "acme/Private-7B not in the catalog"}


def test_no_ground_truth_case_id_in_the_product():
    """Case data stays in groundtruth/ and scripts/ (plans from the cases' own fields, calibration provenance in
    scripts/calibration_cases.json): no file of the package names a dev case."""
    ids = {json.loads(line)["id"] for path in GT.glob("dev*.jsonl") for line in path.read_text().splitlines()
           if line.strip()}
    found = {str(path.relative_to(ROOT)): [case for case in ids if case in path.read_text(errors="ignore")]
             for path in (ROOT / "src").rglob("*") if path.is_file() and path.suffix in (".py", ".json", ".html", ".js")}
    assert {path: cases for path, cases in found.items() if cases} == {}


def test_a_llamacpp_case_whose_gguf_file_is_at_hand_is_planned_from_its_header(tmp_path):
    """The case names a file that exists: its header is the model (every tensor's type), so even a quant name with no
    stock mix (an Unsloth UD file) leaves the model buffers compared, and they are what `explain FILE` prints."""
    import importlib.util

    from vram_detective.api import explain
    from vram_detective.hardware import custom_gpu
    from vram_detective.scoring import score_cases

    helper = importlib.util.spec_from_file_location("tiny_gguf", ROOT / "benchmarks" / "llamacpp_tiny_gguf.py")
    tiny = importlib.util.module_from_spec(helper)
    helper.loader.exec_module(tiny)
    path = tiny.write_llama(tmp_path / "tiny-llama.gguf")
    case = {"id": "tiny-at-hand", "engine": "llamacpp", "engine_version": "b7342", "model": None, "gpu": None,
            "settings": {"gguf_file": str(path), "quant": "UD-Q4_K_XL", "n_ctx": 512, "n_gpu_layers": 99},
            "observed": {"cuda0_model_buffer_mib": 3.0, "cpu_mapped_model_buffer_mib": 2.0, "cuda0_kv_buffer_mib": 6.0}}
    report = score_cases([case])["llamacpp"]
    assert report["scored"] == 1, report["skipped"]
    entry = report["per_case"][0]
    assert entry["model_note"] == f"GGUF header of {path}" and "not_compared" not in entry
    shown = explain(str(path), custom_gpu(48 * 2**30), engine="llamacpp", engine_version="b7342", n_ctx=512,
                    n_gpu_layers=99)
    figures = {f.key: f.value for f in shown.engine_figures if f.schema}
    for key in ("cuda0_model_buffer_mib", "cpu_mapped_model_buffer_mib", "cuda0_kv_buffer_mib"):
        kind = key.split("_buffer")[0].rsplit("_", 1)[-1]
        assert entry["figures"][f"{kind}_buffer_mib:{key}"]["predicted"] == round(figures[key], 4)
    # KV: 6 layers x 512 cells x 2 KV heads x 64 x (K + V) x f16 = 1.5 MiB
    assert figures["cuda0_kv_buffer_mib"] == 1.5


def test_a_case_field_of_the_wrong_type_is_an_unreadable_line_not_a_bug(tmp_path, capsys):
    # issue 31 (benchmarks/fuzz.py over score): each of these ended in exit 3 (AttributeError, OverflowError)
    good = _case("dev.jsonl", "vllm-10517-llama31-8b-3090-20k")
    good_llamacpp = _case("dev-llamacpp.jsonl", "llamacpp-glm-z1-32b-iq4xs-3090ti-32k-fa")
    broken = [dict(good, id="gpu-number", gpu=2.5), dict(good, id="observed-list", observed=[1]),
              dict(good_llamacpp, id="observed-null", observed=None), dict(good, id="tags-number", tags=7),
              dict(good, id="huge-figure", observed={"kv_cache_gib": 1e308}),
              dict(good, id="quantization-object", settings=dict(good["settings"], quantization={"a": 1}))]
    path = tmp_path / "shapes.jsonl"
    path.write_text("\n".join(json.dumps(case) for case in [good, *broken]) + "\n")
    assert main(["score", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [c["id"] for c in report["vllm"]["per_case"]] == [good["id"]]
    reasons = [line["reason"] for line in report["unreadable_lines"]]
    assert reasons == ["`gpu` is float, not str (groundtruth/SCHEMA.md)", "`observed` is list, not dict (groundtruth/SCHEMA.md)",
                       "`observed` is NoneType, not an object (groundtruth/SCHEMA.md)", "`tags` is int, not list (groundtruth/SCHEMA.md)",
                       "observed `kv_cache_gib` is 1e+308: a number as the engine printed it (GiB, MiB or a count)"]
    skipped = {s["id"]: s["reason"] for s in report["vllm"]["skipped"]}
    assert skipped["quantization-object"] == "cannot predict: 'dict' object has no attribute 'lower'"
