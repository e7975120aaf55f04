"""Issue 17: `logs` memory must not grow with the number of starts in a file. forensics/streaming.py keeps the last
runs in full and folds the earlier ones into a summary."""
from __future__ import annotations

import io
import tracemalloc

from vram_detective.forensics import streaming
from vram_detective.engines.vllm.logs.reader import parse_stream
from vram_detective.forensics.streaming import BoundedLogParser, engine_of_file, parse_file_bounded, parse_stream_bounded

START = """\
(EngineCore_DP0 pid=3021) INFO 09-23 18:12:05 [core.py:76] Initializing a V1 LLM engine (v0.10.2) with config: model='Qwen/Qwen3-8B', dtype=torch.bfloat16, max_seq_len=4096, tensor_parallel_size=1
(EngineCore_DP0 pid=3021) INFO 09-23 18:12:21 [gpu_model_runner.py:2392] Model loading took {weights} GiB and 10.2 seconds
(EngineCore_DP0 pid=3021) INFO 09-23 18:12:33 [gpu_worker.py:298] Available KV cache memory: 55.15 GiB
(EngineCore_DP0 pid=3021) INFO 09-23 18:12:34 [kv_cache_utils.py:864] GPU KV cache size: 451,744 tokens
"""


def _log(starts: int) -> bytes:
    return "".join(START.format(weights=f"{15 + index % 7}.25") for index in range(starts)).encode()


def test_earlier_runs_are_summarized_and_the_last_kept_in_full():
    data = _log(300)
    bounded = parse_stream_bounded(io.BytesIO(data), "many.log", keep=8)
    full = parse_stream(io.BytesIO(data), "many.log")
    assert len(full.runs) == 300
    assert [run.index for run in bounded.parsed.runs] == list(range(292, 300))
    assert [run.observed() for run in bounded.parsed.runs] == [run.observed() for run in full.runs[-8:]]
    earlier = bounded.earlier.to_dict()
    assert earlier["runs"] == 292 and earlier["lines"] == [1, 292 * 4]
    assert earlier["figures"]["weights_gib"] == {"runs": 292, "min": 15.25, "max": 21.25, "last": 19.25}
    assert earlier["versions"] == {"0.10.2": 292}
    assert earlier["models"] == {"Qwen/Qwen3-8B": 292}


def test_memory_stays_flat_as_the_starts_grow():
    start = ("INFO 09-23 18:12:21 [gpu_model_runner.py:2392] Model loading took 15.25 GiB and 10.2 seconds\n"
             "INFO 09-23 18:12:33 [gpu_worker.py:298] Available KV cache memory: 55.15 GiB\n")
    held = []
    for starts in (500, 2000):
        data = (start * starts).encode()
        tracemalloc.start()
        bounded = parse_stream_bounded(io.BytesIO(data), "many.log")
        current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert bounded.earlier.count + len(bounded.parsed.runs) == starts
        assert peak < 8 << 20  # the reader's 1 MiB chunks and their text, whatever the file's length
        held.append(current)
    # four times the starts, not four times what is held (the full parser keeps every run: ~1 KiB each here)
    assert held[1] < 256 << 10 and held[0] < 256 << 10, held


def test_one_run_repeating_a_line_forever_keeps_a_bounded_number_of_figures(monkeypatch):
    monkeypatch.setattr(streaming, "MAX_FIGURES_PER_RUN", 500)
    parser = BoundedLogParser()
    line = "(EngineCore_DP0 pid=1) INFO 09-23 18:12:34 [kv_cache_utils.py:864] GPU KV cache size: 451,744 tokens"
    for _ in range(1_000):
        parser.feed(line)
    assert len(parser.finish().runs[-1].figures) == 500


def test_the_file_hooks(tmp_path):
    path = tmp_path / "vllm.log"
    path.write_bytes(_log(12))
    bounded = parse_file_bounded(str(path), keep=3)
    assert (len(bounded.parsed.runs), bounded.earlier.count) == (3, 9)
    assert engine_of_file(str(path)) == "vllm"
