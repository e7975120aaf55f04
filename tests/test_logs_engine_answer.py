"""Issue 27: `logs` on SGLang, llama.cpp and Ollama logs answers first, as it does for vLLM: one verdict (the
engine and release, the GPU the log names, what GPU 0 held), the memory bar, then the figures in words (never
the raw keys), in the terminal at 80 columns, in `--html` and on the web page in a real browser. Issue 23: the
log's own engine answers (its release checked against it), and a long log read whole says what was skipped.
Inputs are the real logs of groundtruth/dev-sglang.jsonl and dev-llamacpp.jsonl."""
from __future__ import annotations

import json
import re

import pytest

from conftest import GROUNDTRUTH, read_jsonl
from vram_detective.cli import main

CASES = {case["id"]: case for name in ("dev.jsonl", "dev-sglang.jsonl", "dev-llamacpp.jsonl")
         for case in read_jsonl(GROUNDTRUTH / name)}
SGLANG = "sglang-qwen3-06b-rtx5080-mineru"  # quotes nvidia-smi: 14,134 of 16,303 MiB
LLAMACPP = "llamacpp-b5622-qwen3-30b-a3b-q4km-4090-5090-experts-cpu"  # names an RTX 4090 (CUDA0) and an RTX 5090
OLLAMA = "llamacpp-ollama-llama31-8b-q4_0-t4-kaggle-8k-np4"  # ggml-cuda's "Device 0: Tesla T4"


def _log(tmp_path, case_id: str) -> str:
    path = tmp_path / f"{case_id}.log"
    path.write_text(CASES[case_id]["log"])
    return str(path)


def _run(args, capsys, monkeypatch, columns=80):
    monkeypatch.setenv("COLUMNS", str(columns))
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _printed_block(out: str) -> list[str]:
    lines = out.splitlines()
    start = lines.index("  What the log printed (GPU 0 where the device shows)") + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("    ")), len(lines))
    return lines[start:end]


# (case, the verdict's start, its figure, a label the figures show in words)
VERDICTS = [
    (SGLANG, "SGLang 0.4.7 on NVIDIA GeForce RTX 5080: nvidia-smi 14,134 MiB of 16,303 MiB.", None,
     r"\n    K cache +5\.57 GiB\n"),
    (LLAMACPP, "llama.cpp b5622 on NVIDIA GeForce RTX 4090: GPU 0 holds about", "weights 136, KV cache 384",
     r"\n    KV cache buffer on CUDA0 +384\.00 MiB\n"),
    (OLLAMA, "Ollama on Tesla T4: GPU 0 holds about", "weights 4,156, KV cache 1,024",
     r"\n    Ollama's estimate: KV cache +1\.00 GiB\n"),
]


@pytest.mark.parametrize("case_id, verdict, figures, label", VERDICTS)
def test_the_terminal_answer_comes_first_in_words_at_80_columns(case_id, verdict, figures, label, tmp_path, capsys,
                                                               monkeypatch):
    code, out, err = _run(["logs", _log(tmp_path, case_id)], capsys, monkeypatch)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    title_end = next(i for i, line in enumerate(lines) if line == "")
    answer = " ".join(" ".join(lines[title_end + 1:title_end + 4]).split())
    assert answer.startswith(verdict)  # the verdict is the first thing after the title
    assert figures is None or figures in answer
    bar = next(i for i, line in enumerate(lines) if line.startswith("  ["))
    read = next(i for i, line in enumerate(lines) if line.startswith("  Read from the log:"))
    assert title_end + 1 < bar < read < lines.index("  What the log printed (GPU 0 where the device shows)")
    assert re.search(label, out)
    keys = set(json.loads(_json_of(tmp_path, case_id, capsys))["observed"])
    printed = _printed_block(out)
    assert len(printed) >= len(keys) - 5  # every figure, a long label on a line of its own
    assert not any(key in line.split() for line in printed for key in keys)  # no raw snake_case key
    assert "vLLM" not in out and "GPU not known" not in out


def _json_of(tmp_path, case_id: str, capsys) -> str:
    assert main(["logs", _log(tmp_path, case_id), "--json"]) == 0
    return capsys.readouterr().out


def test_a_llama_cpp_log_that_names_its_gpu_is_compared_on_that_gpu(tmp_path, capsys):
    report = json.loads(_json_of(tmp_path, LLAMACPP, capsys))
    assert (report["gpu"], report["gpu_basis"]) == ("NVIDIA GeForce RTX 4090", "named in the log, GPU 0 of 2")
    assert report["gpus_named"] == ["NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 5090"]
    assert report["engine_version"] == "b5622"
    bar = report["answer"]["bar"]
    # GPU 0's printed buffers (model 135.76 + KV 384 + compute 1,080 MiB) and the catalog's 4090 total
    assert (bar["weights_gib"], bar["kv_gib"], bar["total_mib"]) == (0.133, 0.375, 24564)
    assert bar["sources"] == {"weights": "printed", "kv": "printed", "used": "printed", "total": "catalog"}
    assert report["labels"]["cuda1_kv_buffer_mib"] == "KV cache buffer on CUDA1"
    assert {key: report["setting_flags"][key] for key in ("n_ctx", "type_k", "n_gpu_layers")} == {
        "n_ctx": "-c", "type_k": "-ctk", "n_gpu_layers": "-ngl"}
    with_model = json.loads(_json_of_args(["logs", _log(tmp_path, LLAMACPP), "--model", "Qwen/Qwen3-30B-A3B",
                                           "--json"], capsys))
    rows = {row["key"]: row for row in with_model["comparison"]}
    assert rows["cuda0_kv_buffer_mib"]["label"] == "KV cache buffer on CUDA0"
    assert rows["cuda0_kv_buffer_mib"]["observed"] == 384.0 and rows["kv_cells"]["observed"] == 16384
    assert "the prediction agrees on" in with_model["answer"]["verdict"]


def _json_of_args(args, capsys) -> str:
    assert main(args) == 0
    return capsys.readouterr().out


def test_a_device_the_catalog_lacks_is_named_in_the_note(tmp_path, capsys):
    report = json.loads(_json_of(tmp_path, "llamacpp-pyllama-mistral7b-q4km-4060laptop-ngl20-768", capsys))
    assert report["gpu"] is None and report["gpus_named"] == ["NVIDIA GeForce RTX 4060 Laptop GPU"]
    assert any(note.startswith("the log names NVIDIA GeForce RTX 4060 Laptop GPU, which the catalog does not know")
               for note in report["notes"])
    assert report["answer"]["verdict"].startswith("llama.cpp: GPU 0 holds about 2,")


@pytest.mark.parametrize("case_id, label", [(SGLANG, "SGLang"), (LLAMACPP, "llama.cpp"), (OLLAMA, "Ollama"),
                                            ("vllm-pr10511-llama3-8b-h100-tp1", "vLLM")])
def test_the_html_report_is_titled_with_the_engine_and_answers_first(case_id, label, tmp_path, capsys):
    html = tmp_path / "report.html"
    assert main(["logs", _log(tmp_path, case_id), "--html", str(html)]) == 0
    assert f"wrote {html}" in capsys.readouterr().err
    text = html.read_text()
    assert re.search(rf"<title>{re.escape(label)} log: ", text) and ("vLLM log" not in text) == (label != "vLLM")
    body = text[text.index("<body"):]
    first = re.search(r'<p class="verdict[^"]*">([^<]+)</p>', body)
    assert first and first[1].startswith(label) and body.index(first[0]) < body.index("<table")
    assert "<pre>" not in body and '"key":' not in body and "relative_gap" not in body  # no raw JSON
    assert '<svg class="bar"' in body
    printed = re.search(r'<table class="observed">.*?</table>', body, re.S)[0]  # the figures, in words
    cells = re.findall(r"<th scope=row>([^<]+)</th>", printed)
    assert len(cells) >= 6 and not any(re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)+", cell) for cell in cells)


@pytest.mark.parametrize("case_id, release", [(SGLANG, "0.9.0"), (LLAMACPP, "0.9.0")])
def test_the_release_given_is_checked_against_the_logs_engine(case_id, release, tmp_path, capsys, monkeypatch):
    # 0.9.0 is a vLLM release: it was accepted for any log; SGLang and llama.cpp have no such release
    code, out, err = _run(["logs", _log(tmp_path, case_id), "--engine-version", release], capsys, monkeypatch)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and release in err


def test_a_long_log_read_whole_says_its_middle_was_skipped(tmp_path, capsys):
    from vram_detective.forensics import command

    case = CASES[LLAMACPP]["log"]
    filler = "llama_perf_context_print: eval time = 1.00 ms / 1 runs\n" * (6 * (1 << 20) // 55)
    path = tmp_path / "long.log"
    path.write_text(case + filler + case)
    size = path.stat().st_size
    assert size > command.TEXT_BYTES
    report = json.loads(_json_of_args(["logs", str(path), "--json"], capsys))
    assert 0 < size - report["bytes_skipped"] <= command.TEXT_BYTES
    assert any(note.startswith(f"the log is long: its middle ({report['bytes_skipped'] / 2**20:,.1f} MiB) was "
                               "skipped") for note in report["notes"])
    assert report["observed"]["cuda0_kv_buffer_mib"] == 384.0  # the last start's figures, read from the end
    short = tmp_path / "short.log"
    short.write_text(case)
    assert json.loads(_json_of_args(["logs", str(short), "--json"], capsys))["bytes_skipped"] == 0


def test_a_failed_start_says_so_first_with_the_engines_error(tmp_path, capsys):
    report = json.loads(_json_of(tmp_path, "sglang-inferencex-2128-dsv4-pro-fp8-8xh200-fail", capsys))
    assert report["answer"]["verdict"] == ("SGLang: did not start: ValueError: Loaded weights leave no GPU memory for "
                                           "the KV cache under --mem-fraction-static=0.88.")
    assert any(note.startswith("GPU not known: this SGLang log names no device") for note in report["notes"])
