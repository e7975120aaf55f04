"""llama.cpp runs on a GPU machine -> ground-truth JSONL in shared/groundtruth/SCHEMA.md's llama.cpp format.

    python3 benchmarks/llamacpp_gpu_groundtruth.py to-jsonl BUILD LOG_DIR > cases.jsonl

benchmarks/llamacpp_gpu_groundtruth.sh writes, per run, RUN.cmd (the llama-server line as run) and RUN.log
(its stderr); this turns each pair into one case: the settings from the line (engines/llamacpp/launch.py), the
figures from the log (engines/llamacpp/log_parser.py), the GPU from ggml_cuda_init's device line, and the
memory lines of the log kept as `log` (the rest of a startup log is noise here).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

_GPU = re.compile(r"Device 0: (.+?), compute capability")
_DEVICES = re.compile(r"found (\d+) CUDA devices")
_KEEP = re.compile(r"buffer size|offloaded \d+/\d+|llama_kv_cache|llama_memory_recurrent|n_ctx|n_seq_max|flash_attn"
                   r"|kv_unified|n_ubatch|model size:|ggml_cuda_init|Device \d+:|system_info|build:")


def case(run: str, command: str, log: str, build: int) -> dict:
    from vram_detective.engines.llamacpp.launch import parse_launch_line
    from vram_detective.engines.llamacpp.log_parser import parse

    line = parse_launch_line(command)
    settings = {k: (list(v) if isinstance(v, tuple) else v) for k, v in line.settings.items()}
    settings["gguf_file"] = Path(line.model or "").name
    settings["binary"] = line.binary
    if "mmproj" in settings:
        settings["mmproj"] = Path(settings["mmproj"]).name
    gpu = _GPU.search(log)
    devices = _DEVICES.search(log)
    return {"id": f"llamacpp-gpu-b{build}-{run}", "source": "benchmarks/llamacpp_gpu_groundtruth.sh (a run of ours)",
            "engine": "llamacpp", "engine_version": f"b{build}", "engine_version_basis": "stated",
            "model": None, "gpu": gpu.group(1).strip() if gpu else None,
            "num_gpus": int(devices.group(1)) if devices else None, "settings": settings, "observed": parse(log),
            "log": "\n".join(x for x in log.splitlines() if _KEEP.search(x)),
            "tags": ["gpu-groundtruth", "tiny-gguf"],
            "notes": f"tiny GGUF written by benchmarks/llamacpp_tiny_gguf.py ({settings['gguf_file']}); llama.cpp "
                     f"built from the llama-cpp-python sdist's vendored tree (build number as given: b{build})"}


def to_jsonl(build: int, log_dir: Path) -> list[dict]:
    out = []
    for cmd in sorted(log_dir.glob("*.cmd")):
        log = cmd.with_suffix(".log")
        if log.is_file():
            out.append(case(cmd.stem, cmd.read_text().strip(), log.read_text(errors="replace"), build))
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[1] != "to-jsonl":
        print(__doc__, file=sys.stderr)
        return 2
    for record in to_jsonl(int(argv[2].lstrip("b")), Path(argv[3])):
        print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
