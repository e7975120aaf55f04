"""Issue 17, one behaviour test per defect, through the command line only (a subprocess running this tree's
src/), so that each one also runs on the tree before the fixes and fails there: the exit code, the number of
lines on stderr, what a server sent, the child's peak memory. Hangs are bounded by a subprocess timeout.
The unit-level checks of the same defects are in tests/test_hostile_*.py."""
from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
QWEN = ("explain", "Qwen/Qwen3-8B", "--gpu", "H100")
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000,
         "max_position_embeddings": 2048, "torch_dtype": "bfloat16"}
COMMIT = "0123456789abcdef0123456789abcdef01234567"


class Outcome:
    def __init__(self, code, out: str, err: str, max_rss_mib: float):
        self.code, self.out, self.err, self.max_rss_mib = code, out, err, max_rss_mib

    @property
    def err_lines(self) -> list[str]:
        return self.err.strip().splitlines()

    def one_line(self) -> str:
        assert len(self.err_lines) == 1 and "Traceback" not in self.err, self.err[-2000:]
        return self.err_lines[0]


def _cli(*argv: str, timeout: float = 60, env: dict | None = None, memory_gib: float = 4) -> Outcome:
    """`python -m vram_detective argv` with this tree's sources; killed (code 'timeout') after `timeout` s,
    its address space capped at `memory_gib` so that a runaway allocation cannot take the machine down."""
    environment = {**os.environ, "PYTHONPATH": str(SRC), "HF_HUB_DISABLE_PROGRESS_BARS": "1", **(env or {})}
    limit = int(memory_gib * (1 << 30))

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    # the child's own peak (VmHWM, written at exit): wait4's ru_maxrss also counts the pytest pages it was forked
    # with (preexec_fn forks), so it grew with whatever the suite had run before
    peak_file = tempfile.NamedTemporaryFile(prefix="peak-", delete=False)
    peak_file.close()
    child = subprocess.Popen([sys.executable, "-c", _OWN_PEAK, peak_file.name, *argv], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=environment, preexec_fn=cap, start_new_session=True)
    reader = {}
    threads = [threading.Thread(target=lambda n=n, s=s: reader.__setitem__(n, s.read()), daemon=True)
               for n, s in (("out", child.stdout), ("err", child.stderr))]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            os.killpg(child.pid, signal.SIGKILL)
            pid, status, usage = os.wait4(child.pid, 0)
            for thread in threads:
                thread.join(5)
            os.unlink(peak_file.name)
            return Outcome("timeout", "", (reader.get("err") or b"").decode(errors="replace"), usage.ru_maxrss / 1024)
        time.sleep(0.02)
    for thread in threads:
        thread.join(10)
    code = os.waitstatus_to_exitcode(status)
    peak = Path(peak_file.name).read_text().strip()
    os.unlink(peak_file.name)
    return Outcome(code, reader["out"].decode(errors="replace"), reader["err"].decode(errors="replace"),
                   int(peak) / 1024 if peak else usage.ru_maxrss / 1024)


_OWN_PEAK = ("import atexit, runpy, sys; out = sys.argv[1]; atexit.register(lambda: open(out, 'w').write(next("
             "line for line in open('/proc/self/status') if line.startswith('VmHWM')).split()[1])); "
             "sys.argv = ['vram_detective', *sys.argv[2:]]; runpy.run_module('vram_detective', run_name='__main__', "
             "alter_sys=True)")


# --- a small Hub server (model info, ranged file reads, a trickle, a lazily made huge file) -------------------


class _Hub:
    def __init__(self, files: dict, sha: str = COMMIT, trickle: bool = False):
        hub = self
        self.files, self.sha, self.trickle, self.sent = files, sha, trickle, {}

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub.answer(self, head=True)

            def do_GET(self):
                hub.answer(self, head=False)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        self.endpoint = "http://127.0.0.1:%d" % self.httpd.server_address[1]

    def answer(self, handler, head: bool) -> None:
        handler.request.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        if handler.path.startswith("/api/models/"):
            info = {"id": "org/m", "sha": self.sha, "siblings": [{"rfilename": name} for name in self.files]}
            return self.send(handler, head, "info", json.dumps(info).encode(), None)
        name = handler.path.split("?")[0].rsplit("/", 1)[-1]
        return self.send(handler, head, name, self.files.get(name, b""), handler.headers.get("Range"))

    def send(self, handler, head: bool, name: str, body, range_header) -> None:
        """body: bytes, or an int (that many spaces, made as they are sent)."""
        size = body if isinstance(body, int) else len(body)
        start, end = 0, size - 1
        found = re.match(r"bytes=(\d+)-(\d+)$", range_header or "")
        if found and int(found.group(1)) < size:
            start, end = int(found.group(1)), min(int(found.group(2)), size - 1)
            handler.send_response(206)
            handler.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        else:
            handler.send_response(200)
        handler.send_header("Content-Length", str(end - start + 1))
        handler.send_header("X-Repo-Commit", COMMIT)
        handler.send_header("ETag", f'"{name}-{size}"')
        handler.end_headers()
        if head:
            return
        try:
            if isinstance(body, int):
                left = end - start + 1
                while left > 0:
                    piece = b" " * min(left, 65536)
                    handler.wfile.write(piece)
                    left -= len(piece)
                    self.sent[name] = self.sent.get(name, 0) + len(piece)
            elif self.trickle:
                for index in range(start, end + 1):
                    handler.wfile.write(body[index:index + 1])
                    handler.wfile.flush()
                    time.sleep(0.5)
            else:
                handler.wfile.write(body[start:end + 1])
                self.sent[name] = self.sent.get(name, 0) + end - start + 1
        except OSError:
            pass

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def hub(tmp_path):
    started = []

    def start(files: dict, **kwargs):
        server = _Hub(files, **kwargs)
        started.append(server)
        return server, {"HF_ENDPOINT": server.endpoint, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_OFFLINE": "0",
                        "HF_HUB_CACHE": str(tmp_path / "hf-home" / "hub"),
                        "HF_ASSETS_CACHE": str(tmp_path / "hf-home" / "assets"), "HF_TOKEN": ""}

    yield start
    for server in started:
        server.stop()


# --- GGUF bytes -----------------------------------------------------------------------------------------------

def _s(text: str) -> bytes:
    return struct.pack("<Q", len(text.encode())) + text.encode()


def _kv_str(key: str, value: str) -> bytes:
    return _s(key) + struct.pack("<I", 8) + _s(value)


def _kv_u32(key: str, value: int) -> bytes:
    return _s(key) + struct.pack("<II", 4, value)


def _tensor(name: str, shape: tuple, offset: int) -> bytes:
    return _s(name) + struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}Q", *shape) + struct.pack("<IQ", 0, offset)


def _gguf(kv: list[bytes], tensors: list[bytes] = ()) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)) + b"".join(kv) + b"".join(tensors)


def _tiny_gguf() -> bytes:
    """A valid llama GGUF: 2 blocks, F32 tensors, data zeros."""
    kv = [_kv_str("general.architecture", "llama"), _kv_u32("llama.block_count", 2),
          _kv_u32("llama.embedding_length", 64), _kv_u32("llama.attention.head_count", 4),
          _kv_u32("llama.attention.head_count_kv", 2), _kv_u32("llama.feed_forward_length", 128),
          _kv_u32("llama.context_length", 256), _kv_u32("llama.vocab_size", 100)]
    shapes = [("token_embd.weight", (64, 100)), ("output_norm.weight", (64,)), ("output.weight", (64, 100))]
    for block in range(2):
        shapes += [(f"blk.{block}.attn_q.weight", (64, 64)), (f"blk.{block}.attn_k.weight", (64, 32)),
                   (f"blk.{block}.attn_v.weight", (64, 32)), (f"blk.{block}.attn_output.weight", (64, 64)),
                   (f"blk.{block}.ffn_gate.weight", (64, 128)), (f"blk.{block}.ffn_up.weight", (64, 128)),
                   (f"blk.{block}.ffn_down.weight", (128, 64)), (f"blk.{block}.attn_norm.weight", (64,)),
                   (f"blk.{block}.ffn_norm.weight", (64,))]
    tensors, offset = [], 0
    for name, shape in shapes:
        tensors.append(_tensor(name, shape, offset))
        count = 1
        for dim in shape:
            count *= dim
        offset += (count * 4 + 31) // 32 * 32
    head = _gguf(kv, tensors)
    head += b"\0" * ((-len(head)) % 32)
    return head + b"\0" * offset


def _model_dir(tmp_path: Path, config: dict | None = None) -> Path:
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config or LLAMA))
    return directory


def _safetensors(names: dict) -> bytes:
    header, offset = {}, 0
    for name, shape in names.items():
        size = 2
        for dim in shape:
            size *= dim
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header).encode()
    return struct.pack("<Q", len(blob)) + blob + b"\0" * offset


# --- 1. a GGUF claiming 5e7 / 2^40 token strings -------------------------------------------------------------

@pytest.mark.parametrize("count", [50_000_000 - 1, 2 ** 40])
def test_1_a_300_byte_gguf_claiming_millions_of_tokens_is_one_line_at_once(tmp_path, count):
    claim = _s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, count) + _s("a") * 8
    data = _gguf([_kv_str("general.architecture", "llama"), claim])
    path = tmp_path / "tokens.gguf"
    path.write_bytes(data + b"\0" * (300 - len(data)))
    outcome = _cli("explain", str(path), "--gpu", "H100", timeout=60, memory_gib=2)
    assert outcome.code == 2 and outcome.max_rss_mib < 400, (outcome.code, outcome.max_rss_mib)
    outcome.one_line()


# --- 2. a 40,000-digit number before " GiB for ..." ----------------------------------------------------------

def test_2_logs_on_a_line_of_40000_digits_ends_in_linear_time(tmp_path):
    log = tmp_path / "digits.log"
    log.write_text("Loading model weights took 5.2 GB\n" + "1" * 40_000
                   + " GiB for weight, x GiB for peak activation\n")
    outcome = _cli("logs", str(log), timeout=30)  # 95 s before (quadratic patterns)
    assert outcome.code == 0 and "Traceback" not in outcome.err, (outcome.code, outcome.err[-500:])


# --- 3. a model-info commit that is a path --------------------------------------------------------------------

def test_3_a_hub_commit_that_is_a_path_writes_nothing_outside_the_cache(tmp_path, hub):
    server, env = hub({"m.gguf": _tiny_gguf()}, sha="../../../../../../x/PWNED")
    outcome = _cli("explain", "org/m", "--gpu", "H100", env=env, timeout=60)
    written = [str(path) for path in tmp_path.rglob("*") if "PWNED" in str(path)] + \
              [str(path) for path in tmp_path.rglob("table.json")]
    assert written == [], written
    assert outcome.code == 2 and "commit" in outcome.one_line()


# --- 4. an index naming files outside the model directory -----------------------------------------------------

@pytest.mark.parametrize("weight_map", ["/etc/passwd", "../other/model.safetensors", "link.safetensors"])
def test_4_index_shards_outside_the_model_directory_are_refused(tmp_path, weight_map):
    directory = _model_dir(tmp_path)
    outside = tmp_path / "other"
    outside.mkdir()
    (outside / "model.safetensors").write_bytes(_safetensors({"a.weight": (4, 4)}))
    (directory / "link.safetensors").symlink_to(outside / "model.safetensors")
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a.weight": weight_map}}))
    outcome = _cli("explain", str(directory), "--gpu", "H100")
    assert outcome.code == 2, (outcome.code, outcome.err[-500:])
    assert "directory" in outcome.one_line()


# --- 5. tracebacks that exited 1 (the code that means "vLLM would refuse") ------------------------------------

@pytest.mark.parametrize("argv", [
    QWEN + ("--max-model-len", "9" * 400),
    QWEN + ("--cpu-offload-gb", "inf"),
    ("fit", "Qwen/Qwen3-8B", "--gpu", "H100", "--context", "4k", "--concurrency", "1e308"),
    QWEN + ("--speculative-config", '{"method": "ngram", "num_speculative_tokens": 1e999, "prompt_lookup_max": 3}'),
    ("explain", "~nouser-vram-detective/x", "--gpu", "H100"),
], ids=["400-digits", "offload-inf", "concurrency-1e308", "spec-1e999", "unknown-user-home"])
def test_5_numbers_too_big_and_odd_paths_are_one_line_exit_2(argv):
    outcome = _cli(*argv)
    assert outcome.code == 2, (outcome.code, outcome.err[-800:])
    outcome.one_line()


@pytest.mark.parametrize("change", [{"dtype": ["BF16"]}, {"num_hidden_layers": float("inf")},
                                    {"nested": None}],
                         ids=["dtype-list", "layers-infinity", "nested-5000"])
def test_5_config_values_of_the_wrong_type_are_one_line_exit_2(tmp_path, change):
    directory = tmp_path / "model"
    directory.mkdir()
    text = json.dumps({**LLAMA, **{k: v for k, v in change.items() if k != "nested"}})
    if "nested" in change:
        text = text[:-1] + ', "nested": ' + "[" * 5000 + "]" * 5000 + "}"
    (directory / "config.json").write_text(text)
    outcome = _cli("explain", str(directory), "--gpu", "H100")
    assert outcome.code == 2, (outcome.code, outcome.err[-800:])
    assert "config.json" in outcome.one_line()  # the file named (before: "unknown torch_dtype ['BF16']")


# --- 6. a Hub server that trickles ----------------------------------------------------------------------------

def test_6_a_trickling_hub_ends_at_the_deadline_with_one_line(hub):
    server, env = hub({"config.json": json.dumps(LLAMA).encode()}, trickle=True)
    env["VRAM_DETECTIVE_HUB_DEADLINE"] = "3"
    started = time.monotonic()
    outcome = _cli("explain", "org/m", "--gpu", "H100", env=env, timeout=40)  # > 120 s before (no deadline)
    assert outcome.code == 2 and time.monotonic() - started < 25, (outcome.code, outcome.err[-500:])
    assert "deadline" in outcome.one_line()


# --- 7. logs memory and output with many startups -------------------------------------------------------------

START = ("(EngineCore_DP0 pid=3021) INFO 09-23 18:12:05 [core.py:76] Initializing a V1 LLM engine (v0.10.2) with "
         "config: model='Qwen/Qwen3-8B', dtype=torch.bfloat16, max_seq_len=4096, tensor_parallel_size=1\n"
         "(EngineCore_DP0 pid=3021) INFO 09-23 18:12:21 [gpu_model_runner.py:2392] Model loading took {w} GiB and "
         "10.2 seconds\n"
         "(EngineCore_DP0 pid=3021) INFO 09-23 18:12:33 [gpu_worker.py:298] Available KV cache memory: 55.15 GiB\n"
         "(EngineCore_DP0 pid=3021) INFO 09-23 18:12:34 [kv_cache_utils.py:864] GPU KV cache size: 451,744 tokens\n")


def test_7_logs_memory_and_output_stay_flat_as_the_startups_grow(tmp_path):
    outcomes = {}
    for starts in (500, 8_000):
        log = tmp_path / f"{starts}.log"
        log.write_text("".join(START.format(w=f"{15 + i % 7}.25") for i in range(starts)))
        outcomes[starts] = _cli("logs", str(log), timeout=120)
        assert outcomes[starts].code == 0, outcomes[starts].err[-500:]
    small, large = outcomes[500], outcomes[8_000]
    # before: every run kept and printed (9.0 GiB and 219 MB of output for 566k startups)
    assert large.max_rss_mib - small.max_rss_mib < 40, (small.max_rss_mib, large.max_rss_mib)
    assert len(large.out) < 2 * len(small.out) + 2000, (len(small.out), len(large.out))


# --- 8. impossible setups reported as starting ----------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    QWEN + ("--num-gpu-blocks-override", "99999999999999999999"),
    QWEN + ("--kv-cache-memory-bytes", "1e20"),
    QWEN + ("--vllm-version", "9.9"),
    QWEN + ("--cpu-offload-gb", "-1"),
    QWEN + ("--swap-space", "nan"),
    ("fit", "Qwen/Qwen3-8B", "--gpu", "H100", "-tp", "2", "--gpus", "1", "--context", "4k"),
], ids=["blocks-1e20", "kv-bytes-1e20", "version-9.9", "offload-minus-1", "swap-nan", "tp2-on-1-gpu"])
def test_8_impossible_setups_are_refused_not_reported_as_starting(argv):
    outcome = _cli(*argv)
    assert outcome.code in (1, 2), (outcome.code, outcome.out[:300])
    outcome.one_line()


def test_8_a_gguf_with_no_kv_heads_is_refused(tmp_path):
    data = _tiny_gguf().replace(_kv_u32("llama.attention.head_count_kv", 2), _kv_u32("llama.attention.head_count_kv", 0))
    (tmp_path / "m.gguf").write_bytes(data)
    outcome = _cli("explain", str(tmp_path / "m.gguf"), "--gpu", "H100")
    assert outcome.code in (1, 2), (outcome.code, outcome.out[:300])
    outcome.one_line()


# --- 9. unbounded sizes ---------------------------------------------------------------------------------------

def test_9_a_300_mb_config_json_is_refused_without_being_read(tmp_path):
    directory = tmp_path / "model"
    directory.mkdir()
    with open(directory / "config.json", "wb") as handle:  # sparse: no disk, 300 MB to whoever reads it
        handle.truncate(300 << 20)
    outcome = _cli("explain", str(directory), "--gpu", "H100")
    assert outcome.code == 2 and outcome.max_rss_mib < 250, (outcome.code, outcome.max_rss_mib)
    assert "limit" in outcome.one_line()


def test_9_a_300_mb_config_json_on_the_hub_is_not_downloaded(hub):
    server, env = hub({"config.json": 300 << 20})
    outcome = _cli("explain", "org/m", "--gpu", "H100", env=env, timeout=120)
    assert server.sent.get("config.json", 0) < (8 << 20) + (1 << 20), server.sent
    assert outcome.code == 2 and "limit" in outcome.one_line()


# --- 10. pipeline ranks ---------------------------------------------------------------------------------------

def test_10_with_pipeline_parallel_the_parts_add_up_to_the_budget():
    outcome = _cli("explain", "unsloth/Llama-3.2-3B-Instruct", "--gpu", "H100 NVL", "--vllm-version", "0.11.2",
                   "-tp", "2", "-pp", "4", "--max-num-seqs", "851", "--kv-cache-dtype", "bfloat16", "--json")
    assert outcome.code == 0
    budget = json.loads(outcome.out)["components"]
    assert sum(child["bytes"] for child in budget["children"]) == budget["bytes"]


# --- 11. FIFOs ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["shard", "gguf", "nvidia-smi"])
def test_11_a_fifo_is_refused_not_waited_on(tmp_path, where):
    if where == "shard":
        directory = _model_dir(tmp_path)
        os.mkfifo(directory / "model.safetensors")
        argv = ("explain", str(directory), "--gpu", "H100")
    elif where == "gguf":  # a directory of GGUF files, one of them a FIFO
        (tmp_path / "ggufs").mkdir()
        os.mkfifo(tmp_path / "ggufs" / "m.gguf")
        argv = ("explain", str(tmp_path / "ggufs"), "--gpu", "H100")
    else:
        (tmp_path / "vllm.log").write_text("Loading model weights took 5.2 GB\n")
        os.mkfifo(tmp_path / "smi.txt")
        argv = ("logs", str(tmp_path / "vllm.log"), "--nvidia-smi", str(tmp_path / "smi.txt"))
    outcome = _cli(*argv, timeout=20)  # blocked forever before
    assert outcome.code == 2, outcome.code
    outcome.one_line()


# --- 12. messages ---------------------------------------------------------------------------------------------

def test_12_gpu_memory_1e300_gib_says_what_is_wrong():
    outcome = _cli("explain", "Qwen/Qwen3-8B", "--gpu-memory", "1e300GiB")
    assert outcome.code == 2 and "positive" not in outcome.one_line() and "GPU" in outcome.one_line()


def test_12_a_gguf_tensor_with_no_dimensions_is_named(tmp_path):
    tensor = _s("token_embd.weight") + struct.pack("<I", 0) + struct.pack("<IQ", 0, 0)
    (tmp_path / "zero.gguf").write_bytes(_gguf([_kv_str("general.architecture", "llama")], [tensor]) + b"\0" * 64)
    outcome = _cli("explain", str(tmp_path / "zero.gguf"), "--gpu", "H100")
    assert outcome.code == 2 and "0 dimensions" in outcome.one_line()


def test_12_a_negative_nvidia_smi_reading_is_refused_not_read_as_positive(tmp_path):
    (tmp_path / "vllm.log").write_text("Loading model weights took 5.2 GB\n")
    (tmp_path / "smi.txt").write_text("index, name, memory.used [MiB], memory.total [MiB]\n0, H100, -10240 MiB, 81920 MiB\n")
    outcome = _cli("logs", str(tmp_path / "vllm.log"), "--nvidia-smi", str(tmp_path / "smi.txt"))
    assert outcome.code == 2 and "negative" in outcome.one_line()


def test_12_one_absurd_number_does_not_drop_the_log_report(tmp_path):
    (tmp_path / "vllm.log").write_text("Loading model weights took 5.2 GB\n# GPU blocks: " + "9" * 400 + "\n")
    outcome = _cli("logs", str(tmp_path / "vllm.log"))  # before: exit 2, "could not analyse the log (OverflowError"
    assert outcome.code == 0, outcome.err[-500:]
    assert "Run 1" in outcome.out
