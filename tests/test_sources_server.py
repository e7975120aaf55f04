"""A real HTTP server (127.0.0.1, ephemeral port, a thread) that answers the Hub endpoints huggingface_hub
uses: model info with the file list (/api/models/{repo}[/revision/{rev}]), HEAD and GET on
/{repo}/resolve/{rev}/{file} (X-Repo-Commit, ETag, Content-Length; Range -> 206 + Content-Range), with the
Hub's X-Error-Code answers for gated repos, missing repos, revisions and files. It counts the body bytes
it sends per file, so tests and benchmarks/fetch.py can measure what a fetch transferred.

Also: the helpers that generate checkpoints for the tests (safetensors files written with the
`safetensors` package, sparse full-size files with real headers for catalog-sized models, GGUF files
written with the `gguf` package), and a few tests of the server itself.
"""
from __future__ import annotations

import hashlib
import json
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

# --- the server -------------------------------------------------------------------------------------------


@dataclass
class FakeRepo:
    repo_id: str
    files: dict  # name -> Path
    commit: str
    gated: bool = False
    branches: tuple = ("main",)
    delay: float = 0.0  # seconds before every answer about this repo (a slow network)


@dataclass
class Traffic:
    lock: threading.Lock = field(default_factory=threading.Lock)
    body_bytes: dict = field(default_factory=dict)  # file name -> body bytes sent
    requests: list = field(default_factory=list)  # (method, path, range header)

    def add(self, method: str, path: str, range_header: str | None, name: str | None, sent: int) -> None:
        with self.lock:
            self.requests.append((method, path, range_header))
            if name is not None:
                self.body_bytes[name] = self.body_bytes.get(name, 0) + sent

    def bytes_for(self, suffix: str) -> int:
        with self.lock:
            return sum(sent for name, sent in self.body_bytes.items() if name.endswith(suffix))

    def reset(self) -> None:
        with self.lock:
            self.body_bytes.clear()
            self.requests.clear()


class FakeHub:
    TOKEN = "hf_test_token"

    def __init__(self, ignore_range: bool = False):
        self.repos: dict[str, FakeRepo] = {}
        self.traffic = Traffic()
        self.ignore_range = ignore_range
        self.server = None
        self.thread = None

    def add_repo(self, repo_id: str, files: dict, gated: bool = False, branches=("main",), delay: float = 0.0) -> FakeRepo:
        commit = hashlib.sha1(repo_id.encode() + b"".join(sorted(n.encode() for n in files))).hexdigest()
        repo = FakeRepo(repo_id, {name: Path(path) for name, path in files.items()}, commit, gated, tuple(branches), delay)
        self.repos[repo_id] = repo
        return repo

    @property
    def endpoint(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeHub":
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                super().setup()
                # headers and body go out in two writes: without this, Nagle + delayed ACKs add 40 ms a request
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args):  # quiet
                pass

            def do_HEAD(self):
                hub._answer(self, head=True)

            def do_GET(self):
                hub._answer(self, head=False)

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # the default 5 drops concurrent connects (1 s SYN retries)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    # -- request handling --

    def _send(self, handler, status: int, headers: dict, body: bytes = b"", head: bool = False, name: str | None = None,
              range_header: str | None = None) -> None:
        handler.send_response(status)
        headers = dict(headers)
        length = headers.pop("Content-Length", None) or str(len(body))
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", length)
        handler.end_headers()
        sent = 0
        if not head and body:
            try:
                handler.wfile.write(body)
                sent = len(body)
            except (BrokenPipeError, ConnectionResetError):
                pass
        self.traffic.add(handler.command, handler.path, range_header, name, sent)

    def _error(self, handler, status: int, code: str, message: str, head: bool) -> None:
        body = json.dumps({"error": message}).encode()
        self._send(handler, status, {"X-Error-Code": code, "X-Error-Message": message,
                                     "Content-Type": "application/json"}, body, head)

    def _revision(self, repo: FakeRepo, revision: str) -> bool:
        return revision in repo.branches or revision == repo.commit

    def _answer(self, handler, head: bool) -> None:
        path = unquote(urlparse(handler.path).path)
        authorized = handler.headers.get("Authorization") == f"Bearer {self.TOKEN}"
        match = re.match(r"^/api/models/(?P<repo>[^/]+(?:/[^/]+)?)(?:/revision/(?P<rev>.+))?$", path)
        if match:
            repo = self.repos.get(match.group("repo"))
            if repo is None:
                return self._error(handler, 404, "RepoNotFound", "Repository not found", head)
            if repo.delay:
                time.sleep(repo.delay)
            revision = match.group("rev") or "main"
            if not self._revision(repo, revision):
                return self._error(handler, 404, "RevisionNotFound", "Invalid rev id", head)
            info = {"id": repo.repo_id, "modelId": repo.repo_id, "sha": repo.commit, "private": False,
                    "gated": "manual" if repo.gated else False, "disabled": False, "tags": [], "downloads": 0,
                    "likes": 0, "siblings": [{"rfilename": name} for name in sorted(repo.files)]}
            return self._send(handler, 200, {"Content-Type": "application/json"}, json.dumps(info).encode(), head)
        match = re.match(r"^/(?P<repo>[^/]+/[^/]+|[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$", path)
        if not match:
            return self._error(handler, 404, "NotFound", "no such endpoint", head)
        repo = self.repos.get(match.group("repo"))
        if repo is None:
            return self._error(handler, 404, "RepoNotFound", "Repository not found", head)
        if repo.delay:
            time.sleep(repo.delay)
        if repo.gated and not authorized:
            return self._error(handler, 401, "GatedRepo", "Access to model is restricted", head)
        if not self._revision(repo, match.group("rev")):
            return self._error(handler, 404, "RevisionNotFound", "Invalid rev id", head)
        name = match.group("file")
        if name not in repo.files:
            return self._error(handler, 404, "EntryNotFound", "Entry not found", head)
        file_path = repo.files[name]
        size = file_path.stat().st_size
        etag = hashlib.sha256(f"{repo.commit}/{name}/{size}".encode()).hexdigest()
        headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{etag}"', "Accept-Ranges": "bytes",
                   "Content-Type": "application/octet-stream"}
        range_header = handler.headers.get("Range")
        if head:
            headers["Content-Length"] = str(size)
            return self._send(handler, 200, headers, b"", True, name, range_header)
        start, end = 0, size - 1
        status = 200
        if range_header and not self.ignore_range:
            found = re.match(r"bytes=(\d+)-(\d*)$", range_header.strip())
            if found:
                start = int(found.group(1))
                end = min(int(found.group(2)) if found.group(2) else size - 1, size - 1)
                if start >= size:
                    headers["Content-Range"] = f"bytes */{size}"
                    return self._send(handler, 416, headers, b"", False, name, range_header)
                status = 206
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        with open(file_path, "rb") as handle:
            handle.seek(start)
            body = handle.read(end - start + 1)
        self._send(handler, status, headers, body, False, name, range_header)


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """A started FakeHub with HF_ENDPOINT pointed at it and every HF cache inside tmp_path."""
    hub = FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_ASSETS_CACHE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    yield hub
    hub.stop()


# --- checkpoint generators -------------------------------------------------------------------------------

_NP_DTYPES = {"bfloat16": ("uint16", 2), "float16": ("float16", 2), "float32": ("float32", 4), "int32": ("int32", 4),
              "float8_e4m3fn": ("uint8", 1), "uint8": ("uint8", 1), "int8": ("int8", 1)}


def write_safetensors(path: Path, tensors: dict, metadata: dict | None = None) -> Path:
    """tensors: name -> (torch dtype name, shape); zeros, written by the safetensors package."""
    import numpy as np
    import safetensors

    arrays = {}
    for name, (dtype, shape) in tensors.items():
        numpy_dtype, _ = _NP_DTYPES[dtype]
        arrays[name] = (dtype, list(shape), np.zeros(shape, dtype=numpy_dtype))
    if hasattr(safetensors, "TensorSpec"):  # safetensors >= 0.8
        specs = {name: safetensors.TensorSpec(dtype=dtype, shape=shape, data_ptr=array.ctypes.data,
                                               data_len=array.nbytes) for name, (dtype, shape, array) in arrays.items()}
        safetensors.serialize_file(specs, str(path), metadata=metadata or {"format": "pt"})
    else:  # older: a dict per tensor with the torch dtype name (what safetensors.torch passes)
        flat = {name: {"dtype": dtype, "shape": shape, "data": array.tobytes()}
                for name, (dtype, shape, array) in arrays.items()}
        safetensors.serialize_file(flat, str(path), metadata=metadata or {"format": "pt"})
    return path


def write_sparse_safetensors(path: Path, tensors: dict) -> Path:
    """A full-size safetensors file whose data region is a hole (no disk, no time): a real header for a
    catalog-sized model. Same layout the safetensors package writes (compact JSON padded to 8 bytes)."""
    codes = {"bfloat16": ("BF16", 2), "float16": ("F16", 2), "float32": ("F32", 4), "int32": ("I32", 4)}
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in sorted(tensors.items()):
        code, size = codes[dtype]
        count = 1
        for dim in shape:
            count *= dim
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [offset, offset + count * size]}
        offset += count * size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(blob)))
        out.write(blob)
        out.truncate(8 + len(blob) + offset)
    return path


def llama_tensors(config: dict, dtype: str | None = None, inv_freq: bool = False) -> dict:
    """The tensors a Hugging Face Llama/Qwen2 checkpoint of this config stores: name -> (dtype, shape)."""
    dtype = dtype or config.get("torch_dtype", "bfloat16")
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads", heads)
    head = config.get("head_dim") or hidden // heads
    vocab = config["vocab_size"]
    bias = config.get("model_type") == "qwen2" or config["architectures"][0].startswith("Qwen2")
    tensors = {"model.embed_tokens.weight": (dtype, (vocab, hidden)), "model.norm.weight": (dtype, (hidden,))}
    if not config.get("tie_word_embeddings", False):
        tensors["lm_head.weight"] = (dtype, (vocab, hidden))
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors[p + "self_attn.q_proj.weight"] = (dtype, (heads * head, hidden))
        tensors[p + "self_attn.k_proj.weight"] = (dtype, (kv * head, hidden))
        tensors[p + "self_attn.v_proj.weight"] = (dtype, (kv * head, hidden))
        if bias:
            tensors[p + "self_attn.q_proj.bias"] = (dtype, (heads * head,))
            tensors[p + "self_attn.k_proj.bias"] = (dtype, (kv * head,))
            tensors[p + "self_attn.v_proj.bias"] = (dtype, (kv * head,))
        tensors[p + "self_attn.o_proj.weight"] = (dtype, (hidden, heads * head))
        tensors[p + "mlp.gate_proj.weight"] = (dtype, (inter, hidden))
        tensors[p + "mlp.up_proj.weight"] = (dtype, (inter, hidden))
        tensors[p + "mlp.down_proj.weight"] = (dtype, (hidden, inter))
        tensors[p + "input_layernorm.weight"] = (dtype, (hidden,))
        tensors[p + "post_attention_layernorm.weight"] = (dtype, (hidden,))
        if inv_freq:
            tensors[p + "self_attn.rotary_emb.inv_freq"] = ("float32", (head // 2,))
    return tensors


TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 200,
    "max_position_embeddings": 256, "torch_dtype": "bfloat16", "tie_word_embeddings": False, "rms_norm_eps": 1e-5,
}


def write_sharded(directory: Path, config: dict, tensors: dict, shards: int, sparse: bool = False) -> dict:
    """config.json + `shards` safetensors files + model.safetensors.index.json; returns name -> path."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    names = list(tensors)
    files = {"config.json": directory / "config.json"}
    weight_map = {}
    for index in range(shards):
        part = {name: tensors[name] for name in names[index::shards]}
        filename = "model.safetensors" if shards == 1 else f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
        (write_sparse_safetensors if sparse else write_safetensors)(directory / filename, part)
        files[filename] = directory / filename
        weight_map.update({name: filename for name in part})
    if shards > 1:
        (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
        files["model.safetensors.index.json"] = directory / "model.safetensors.index.json"
    return files


GGUF_TINY = {"hidden": 256, "intermediate": 512, "layers": 2, "heads": 4, "kv_heads": 2, "vocab": 320, "context": 4096}


def write_gguf(path: Path, types: dict | None = None, tied: bool = False, arch: str = "llama",
               split_max_tensors: int = 0, tokens: int = 0) -> list[Path]:
    """A GGUF model written by the gguf package: llama-shaped, each tensor in the GGML type `types` names
    (by GGUF tensor kind, default Q4_K), zeros. Returns the file(s) written."""
    import numpy as np
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter

    t = GGUF_TINY
    types = {"token_embd": "Q6_K", "attn_q": "Q4_K", "attn_k": "Q4_0", "attn_v": "Q8_0", "attn_output": "Q5_K",
             "ffn_gate": "Q4_K", "ffn_up": "Q4_K", "ffn_down": "Q6_K", "output": "Q6_K", **(types or {})}
    head = t["hidden"] // t["heads"]
    writer = GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
    writer.add_block_count(t["layers"])
    writer.add_context_length(t["context"])
    writer.add_embedding_length(t["hidden"])
    writer.add_feed_forward_length(t["intermediate"])
    writer.add_head_count(t["heads"])
    writer.add_head_count_kv(t["kv_heads"])
    writer.add_rope_dimension_count(head)
    writer.add_float32(f"{arch}.rope.freq_base", 10000.0)
    writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    writer.add_file_type(15)
    if tokens:
        writer.add_token_list([f"tok{i}" for i in range(tokens)])

    def add(name: str, kind: str, shape: tuple[int, int] | tuple[int]):
        if len(shape) == 1:
            writer.add_tensor(name, np.zeros(shape, dtype=np.float32))
            return
        qtype = GGMLQuantizationType[types[kind]]
        if qtype == GGMLQuantizationType.F16:
            writer.add_tensor(name, np.zeros(shape, dtype=np.float16))
            return
        if qtype == GGMLQuantizationType.F32:
            writer.add_tensor(name, np.zeros(shape, dtype=np.float32))
            return
        block, size = GGML_QUANT_SIZES[qtype]
        rows, cols = shape
        writer.add_tensor(name, np.zeros((rows, cols // block * size), dtype=np.uint8), raw_dtype=qtype)

    add("token_embd.weight", "token_embd", (t["vocab"], t["hidden"]))
    for i in range(t["layers"]):
        add(f"blk.{i}.attn_norm.weight", "", (t["hidden"],))
        add(f"blk.{i}.attn_q.weight", "attn_q", (t["heads"] * head, t["hidden"]))
        add(f"blk.{i}.attn_k.weight", "attn_k", (t["kv_heads"] * head, t["hidden"]))
        add(f"blk.{i}.attn_v.weight", "attn_v", (t["kv_heads"] * head, t["hidden"]))
        add(f"blk.{i}.attn_output.weight", "attn_output", (t["hidden"], t["heads"] * head))
        add(f"blk.{i}.ffn_norm.weight", "", (t["hidden"],))
        add(f"blk.{i}.ffn_gate.weight", "ffn_gate", (t["intermediate"], t["hidden"]))
        add(f"blk.{i}.ffn_up.weight", "ffn_up", (t["intermediate"], t["hidden"]))
        add(f"blk.{i}.ffn_down.weight", "ffn_down", (t["hidden"], t["intermediate"]))
    add("output_norm.weight", "", (t["hidden"],))
    if not tied:
        add("output.weight", "output", (t["vocab"], t["hidden"]))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if split_max_tensors:
        return sorted(path.parent.glob(path.stem + "-*-of-*.gguf"))
    return [path]


# --- the server itself ---------------------------------------------------------------------------------


def test_server_answers_range_requests_and_hub_errors(fake_hub, tmp_path):
    import urllib.error
    import urllib.request

    files = write_sharded(tmp_path / "m", TINY_LLAMA, llama_tensors(TINY_LLAMA), shards=2)
    repo = fake_hub.add_repo("org/tiny", files)
    url = f"{fake_hub.endpoint}/org/tiny/resolve/main/model-00001-of-00002.safetensors"
    request = urllib.request.Request(url, headers={"Range": "bytes=0-7"})
    with urllib.request.urlopen(request) as response:
        assert response.status == 206
        assert len(response.read()) == 8
        assert response.headers["Content-Range"].endswith(f"/{files['model-00001-of-00002.safetensors'].stat().st_size}")
    head = urllib.request.Request(url, method="HEAD")
    with urllib.request.urlopen(head) as response:
        assert response.headers["X-Repo-Commit"] == repo.commit
        assert response.headers["ETag"].startswith('"')
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(f"{fake_hub.endpoint}/org/tiny/resolve/main/nope.json")
    assert error.value.code == 404 and error.value.headers["X-Error-Code"] == "EntryNotFound"
    with urllib.request.urlopen(f"{fake_hub.endpoint}/api/models/org/tiny") as response:
        info = json.loads(response.read())
    assert info["sha"] == repo.commit and {"rfilename": "config.json"} in info["siblings"]
