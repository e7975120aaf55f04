"""Measure the graph a real llama.cpp build allocates its CPU compute buffer for: load a zero-weight GGUF of a real
architecture (written like benchmarks/llamacpp_cpu_groundtruth.py does) in llama-cpp-python VERSION's venv, decode
(and abort at once) one n_ubatch batch with every token an output (the reserve graph's topology) and read, through the scheduler's
eval callback, every node: op, type, shape, strides, flags, sources, view source and its offset in the compute
buffer. The offsets are the ones ggml-alloc placed at the last pp reserve (llama-context.cpp), since a graph of the
same topology and no larger tensors is not re-reserved (ggml-alloc.c ggml_gallocr_needs_realloc).

    python3 benchmarks/llamacpp_graph_dump.py 0.3.16 Qwen/Qwen3-0.6B --n-ctx 4096 [--flash-attn on] [--out F.json]

Used to check engines/llamacpp/graph.py (the node sequence) and galloc.py (the allocator replay) against the real
engine; the output is JSON: {"buffer_size": bytes, "nodes": [...], "leafs": [...]}.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

OPS_UNKNOWN = "?"


class Tensor(ctypes.Structure):
    pass


Tensor._fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4),
                   ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16),
                   ("flags", ctypes.c_int32), ("src", ctypes.POINTER(Tensor) * 10),
                   ("view_src", ctypes.POINTER(Tensor)), ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p),
                   ("name", ctypes.c_char * 64), ("extra", ctypes.c_void_p), ("padding", ctypes.c_char * 8)]


def child(path: str, s: dict) -> int:
    import llama_cpp

    lib = Path(llama_cpp.__file__).parent / "lib"
    base = ctypes.CDLL(str(lib / "libggml-base.so"))
    base.ggml_op_name.restype = ctypes.c_char_p
    base.ggml_op_name.argtypes = [ctypes.c_int]
    base.ggml_backend_buffer_get_base.restype = ctypes.c_void_p
    base.ggml_backend_buffer_get_base.argtypes = [ctypes.c_void_p]
    base.ggml_backend_buffer_get_size.restype = ctypes.c_size_t
    base.ggml_backend_buffer_get_size.argtypes = [ctypes.c_void_p]
    base.ggml_nbytes.restype = ctypes.c_size_t
    base.ggml_nbytes.argtypes = [ctypes.c_void_p]
    llama_cpp.llama_backend_init()
    mp = llama_cpp.llama_model_default_params()
    mp.n_gpu_layers = 0
    mp.use_extra_bufts = False
    model = llama_cpp.llama_model_load_from_file(path.encode(), mp)
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = s["n_ctx"], s["n_ubatch"], s["n_ubatch"], s["n_parallel"]
    types = {"f16": 1, "q8_0": 8}
    cp.type_k, cp.type_v = types[s["type_k"]], types[s["type_v"]]
    if hasattr(cp, "flash_attn_type"):
        cp.flash_attn_type = {"on": 1, "off": 0}[s["flash_attn"]]
    else:
        cp.flash_attn = s["flash_attn"] == "on"
    cp.swa_full, cp.kv_unified = bool(s["swa_full"]), bool(s["kv_unified"])
    cp.n_threads = cp.n_threads_batch = 1
    seen: dict[int, dict] = {}
    nodes: list[int] = []
    leafs: list[int] = []

    def describe(ptr: int) -> dict:
        if ptr in seen:
            return seen[ptr]
        t = Tensor.from_address(ptr)
        srcs = [ctypes.cast(t.src[j], ctypes.c_void_p).value for j in range(10)]
        while srcs and srcs[-1] is None:
            srcs.pop()
        vs = ctypes.cast(t.view_src, ctypes.c_void_p).value
        d = {"id": ptr, "name": t.name.decode(errors="replace"), "op": base.ggml_op_name(t.op).decode(),
             "type": t.type, "ne": list(t.ne), "nb": list(t.nb), "flags": t.flags, "src": srcs, "view_src": vs,
             "view_offs": t.view_offs, "buffer": t.buffer, "data": t.data, "nbytes": base.ggml_nbytes(ptr)}
        seen[ptr] = d
        for p in srcs + [vs]:
            if p is not None and p not in seen:
                sub = describe(p)
                if sub["op"] == "NONE":
                    leafs.append(p)
        return d

    @llama_cpp.ggml_backend_sched_eval_callback
    def callback(tensor, ask, user_data):
        ptr = ctypes.cast(tensor, ctypes.c_void_p).value
        if ask and ptr not in nodes:
            for p in describe(ptr)["src"]:
                if p is not None:
                    describe(p)
            nodes.append(ptr)
        return False

    cp.cb_eval = callback

    @llama_cpp.ggml_abort_callback
    def stop(user_data):  # every node has been read once the computation starts: nothing needs computing
        return True

    cp.abort_callback = stop
    ctx = llama_cpp.llama_init_from_model(model, cp)
    n = s["n_ubatch"]
    batch = llama_cpp.llama_batch_init(n, 0, 1)
    for i in range(n):
        batch.token[i] = 3 + i
        batch.pos[i] = i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = 1
    batch.n_tokens = n
    rc = llama_cpp.llama_decode(ctx, batch)
    bufs: dict[int, int] = {}
    for p in nodes:
        d = seen[p]
        if d["view_src"] is None and d["buffer"]:
            bufs[d["buffer"]] = bufs.get(d["buffer"], 0) + 1
    compute = max(bufs, key=bufs.get)
    origin = base.ggml_backend_buffer_get_base(compute)
    out = {"rc": rc, "buffer_size": base.ggml_backend_buffer_get_size(compute), "nodes": [], "leafs": []}
    for key, ids in (("nodes", nodes), ("leafs", leafs)):
        for p in ids:
            d = dict(seen[p])
            d["offset"] = (d["data"] - origin) if d["buffer"] == compute and d["data"] else None
            d["in_compute"] = d.pop("buffer") == compute
            d.pop("data")
            out[key].append(d)
    print("DUMP:" + json.dumps(out))
    return 0


def fixture(dump: dict, a, s: dict) -> dict:
    nodes = [[t["op"], t["ne"], None if t["view_src"] is not None else t["offset"]] for t in dump["nodes"]]
    return {"source": f"benchmarks/llamacpp_graph_dump.py {a.version} {a.model} (llama-cpp-python {a.version} built "
                      "on this CPU, GGML_NATIVE=OFF; zero-weight F16 GGUF)",
            "model": a.model, "llama_cpp_python": a.version, "settings": s, "buffer_size": dump["buffer_size"],
            "nodes": nodes}


def main(argv=None) -> int:
    import llamacpp_cpu_groundtruth as gt

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("version")
    ap.add_argument("model")
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--n-ubatch", type=int, default=512)
    ap.add_argument("--n-parallel", type=int, default=1)
    ap.add_argument("--flash-attn", default="off")
    ap.add_argument("--type-kv", default="f16")
    ap.add_argument("--swa-full", action="store_true")
    ap.add_argument("--kv-unified", action="store_true")
    ap.add_argument("--work", default="/tmp/galloc-gguf")
    ap.add_argument("--out")
    ap.add_argument("--fixture", help="also write the compact form tests read: each node's op, shape and offset "
                    "(null for a view)")
    a = ap.parse_args(argv)
    cfg = gt.read_config(a.model)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"{a.model.split('/')[-1].lower()}-F16.gguf"
    if not path.exists():
        gt.write_gguf(path, *gt.gguf_layout(cfg))
    s = {"n_ctx": a.n_ctx, "n_ubatch": a.n_ubatch, "n_parallel": a.n_parallel, "flash_attn": a.flash_attn,
         "type_k": a.type_kv, "type_v": a.type_kv, "swa_full": a.swa_full, "kv_unified": a.kv_unified}
    py = Path(f"/work/venvs/llcpp-{a.version}/bin/python")
    proc = subprocess.run([str(py), __file__, "--child", str(path), json.dumps(s)], capture_output=True, text=True)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("DUMP:")), None)
    if line is None:
        sys.stderr.write(proc.stderr[-3000:])
        return 1
    dump = json.loads(line[5:])
    text = json.dumps(dump)
    if a.out:
        Path(a.out).write_text(text)
    if a.fixture:
        Path(a.fixture).write_text(json.dumps(fixture(dump, a, s)) + "\n")
    print(f"{len(dump['nodes'])} nodes, {len(dump['leafs'])} leafs, compute buffer {dump['buffer_size'] / 2**20:.2f} MiB")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        sys.exit(child(sys.argv[2], json.loads(sys.argv[3])))
    sys.exit(main())
