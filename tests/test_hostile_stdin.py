"""Issues 30 and 31, `logs` on standard input and pasted logs: read in chunks like a file (binary refused from
its first bytes, memory bounded whatever the size), and a pasted log naming many models does not re-read the
catalog per name. Through the command line (a child process: its exit code and peak memory)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from test_hostile_regressions import SRC

ROOT = SRC.parent


# the child reports its own peak (VmHWM of its own address space, after exec): wait4's ru_maxrss would include the
# pages the child shared with this (large) pytest process between fork and exec
_MEASURED = ("import atexit, runpy, sys; out = sys.argv[1]; "
             "atexit.register(lambda: open(out, 'w').write(next(l for l in open('/proc/self/status') "
             "if l.startswith('VmHWM')).split()[1])); sys.argv = ['vram_detective', *sys.argv[2:]]; "
             "runpy.run_module('vram_detective', run_name='__main__', alter_sys=True)")


def _peak_mib(path, tmp_path, timeout: float = 300) -> tuple[int, float, str]:
    """`logs - --json` with `path` on standard input: (exit code, the child's peak resident MiB, stderr)."""
    report = tmp_path / "peak.txt"
    with open(path, "rb") as stdin:
        done = subprocess.run([sys.executable, "-c", _MEASURED, str(report), "logs", "-", "--json"], stdin=stdin,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout,
                              env={**os.environ, "PYTHONPATH": str(SRC)})
    return done.returncode, int(report.read_text()) / 1024, done.stderr.decode()


def _dev_logs() -> bytes:
    logs = []
    for name in ("dev-llamacpp.jsonl", "dev.jsonl", "dev-sglang.jsonl"):
        for line in (ROOT / "groundtruth" / name).read_text().splitlines():
            text = json.loads(line).get("log")
            if text:
                logs.append(text.rstrip("\n") + "\n")
    return "".join(logs).encode()


def test_random_bytes_on_stdin_are_refused_from_the_first_chunk(tmp_path):
    """100 MB of random bytes grew to 1.1 GiB before 'not a text log' (issue 30)."""
    path = tmp_path / "random.bin"
    with open(path, "wb") as out:
        for _ in range(40):
            out.write(os.urandom(1 << 20))
    code, peak, err = _peak_mib(path, tmp_path)
    assert code == 2 and err.strip() == "vram-detective: error: standard input is not a text log (binary data)"
    assert peak < 64, f"{peak:.0f} MiB"


def test_a_large_mixed_log_on_stdin_stays_in_bounded_memory(tmp_path):
    """300 MB of mixed engines grew to 818 MiB on standard input; a file was bounded (issue 30). 80 MB here."""
    unit = _dev_logs()
    path = tmp_path / "mixed.log"
    with open(path, "wb") as out:
        for _ in range(80_000_000 // len(unit) + 1):
            out.write(unit)
    code, peak, err = _peak_mib(path, tmp_path)
    assert code == 0, err
    assert peak < 64, f"{peak:.0f} MiB"


def test_a_pasted_log_naming_thousands_of_models_is_cheap(capsys):
    """Every model='...' re-read the ~170 catalog files: a 2 MiB POST cost 428 s of server CPU (issue 31). The
    names are now matched against the catalog read once, and at most MAX_NAMED_CANDIDATES are tried."""
    from vram_detective.engines.vllm.logs import infer
    from vram_detective.model import sources
    from vram_detective.web import service

    log = json.loads((ROOT / "groundtruth" / "dev.jsonl").read_text().splitlines()[0])["log"]
    filler = "".join(f"INFO x model='org{i}/m{i}' y\n" for i in range(40_000))[:(2 << 20) - len(log) - 10]
    reads = []
    original = sources._read_catalog
    sources._read_catalog = lambda path: reads.append(path) or original(path)
    try:
        infer._catalog_ids.cache_clear()
        out = service.logs_json(filler + log)
    finally:
        sources._read_catalog = original
    assert out["runs"][0]["model_used_for_prediction"]["model"] == "Qwen/Qwen2.5-7B-Instruct-AWQ"
    # a few passes over the catalog for the whole log (inference by weights reads it too), not one per name
    assert len(reads) <= 4 * len(sources._catalog_files())
