"""Real llama.cpp as ground truth, on the CPU: build llama-cpp-python VERSION from its source archive, write GGUF
files with the real tensor names, shapes and metadata of real architectures (zero weights: memory does not depend
on values), quantize them with that build's own quantizer (llama_model_quantize), load each over a grid of
settings with n_gpu_layers = 0, capture every line llama.cpp logs, and write the runs as ground-truth cases
(groundtruth/SCHEMA.md, llama.cpp `observed` keys read from the log by the project's own parser).

    python3 benchmarks/llamacpp_cpu_groundtruth.py 0.3.16               # -> groundtruth/cpu/llamacpp_b6150.jsonl
    python3 benchmarks/llamacpp_cpu_groundtruth.py 0.3.36 --models Qwen/Qwen3-0.6B --quick

The build goes into /work/venvs/llcpp-VERSION (or $LLAMACPP_VENV), `CMAKE_ARGS=-DGGML_NATIVE=OFF` (a CPU build
that runs on any x86-64 with AVX2). GGUF files go to --work (default /tmp/llamacpp-cpu-gt): the F16 files are
sparse (zero data is never written). Each load runs in a child process of that venv's python (this file with
--child), so one load's memory is gone before the next. Prints a table of the loads at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS_DIRS = (ROOT.parent / "shared" / "models", ROOT / "groundtruth" / "models")
# llama-cpp-python release -> the llama.cpp build it vendors (its CHANGELOG's commit; engines/llamacpp/releases.py)
BUILDS = {"0.3.16": 6150, "0.3.36": 11312}
VENDORED = {"0.3.16": "llama.cpp@4227c9b (2025-08-14)", "0.3.36": "llama.cpp@0c1e57098 (2026-10-01)"}
DEFAULT_MODELS = ("Qwen/Qwen2.5-0.5B", "Qwen/Qwen3-0.6B", "meta-llama/Llama-3.2-1B-Instruct", "google/gemma-3-1b-it",
                  "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "google/gemma-2-2b", "microsoft/Phi-3-mini-4k-instruct")
# llama_ftype ids (include/llama.h) and the file type name print_info shows
FTYPES = {"F16": 1, "Q8_0": 7, "Q4_0": 2, "Q4_K_M": 15}
GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8}
KV_BUDGET = 2 * 2**30  # keep each load's KV under this (the machine is shared)

# ------------------------------------------------------------------------------------------------------------
# GGUF writing (format: ggml/docs/gguf.md; tensor infos in ggml order, ne[0] the row)
# ------------------------------------------------------------------------------------------------------------
T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9
TYPE_F32, TYPE_F16 = 0, 1
ALIGN = 32


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _kv(key: str, value) -> bytes:
    if isinstance(value, bool):
        return _s(key) + struct.pack("<i?", T_BOOL, value)
    if isinstance(value, int):
        return _s(key) + struct.pack("<iI", T_UINT32, value)
    if isinstance(value, float):
        return _s(key) + struct.pack("<if", T_FLOAT32, value)
    if isinstance(value, str):
        return _s(key) + struct.pack("<i", T_STRING) + _s(value)
    kind, items = value  # ("str" | "f32" | "i32", list)
    head = _s(key) + struct.pack("<i", T_ARRAY)
    if kind == "str":
        return head + struct.pack("<iQ", T_STRING, len(items)) + b"".join(_s(x) for x in items)
    fmt, tid = {"f32": ("f", T_FLOAT32), "i32": ("i", T_INT32)}[kind]
    return head + struct.pack("<iQ", tid, len(items)) + struct.pack(f"<{len(items)}{fmt}", *items)


def write_gguf(path: Path, meta: list[tuple[str, object]], tensors: list[tuple[str, tuple[int, ...], int]]) -> int:
    """A GGUF v3 file whose tensor data are zeros (a sparse tail); returns the file size."""
    infos, offset = [], 0
    for name, ne, ttype in tensors:
        infos.append(_s(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
                     + struct.pack("<iQ", ttype, offset))
        n = 1
        for x in ne:
            n *= x
        offset += -(-(n * (4 if ttype == TYPE_F32 else 2)) // ALIGN) * ALIGN
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)) + b"".join(_kv(k, v) for k, v in meta)
    head += b"".join(infos)
    head += b"\0" * (-len(head) % ALIGN)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + offset)
    return len(head) + offset


def _vocab(n_vocab: int) -> list[tuple[str, object]]:
    """A SentencePiece-style vocabulary of the model's size (byte tokens for fallback, then plain pieces)."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    tokens += [f"\u2581t{i}" for i in range(n_vocab - len(tokens))]
    types = [2, 3, 3] + [6] * 256 + [1] * (n_vocab - 259)
    if n_vocab > 32000:  # llama-vocab.cpp looks up <|endoftext|> for a model named Phi-3 (its id in Phi-3's vocab)
        tokens[32000], types[32000] = "<|endoftext|>", 3
    return [("tokenizer.ggml.model", "llama"), ("tokenizer.ggml.tokens", ("str", tokens)),
            ("tokenizer.ggml.scores", ("f32", [0.0] * n_vocab)), ("tokenizer.ggml.token_type", ("i32", types)),
            ("tokenizer.ggml.bos_token_id", 1), ("tokenizer.ggml.eos_token_id", 2),
            ("tokenizer.ggml.unknown_token_id", 0)]


def architecture(cfg: dict) -> str:
    """The GGUF architecture convert_hf_to_gguf.py writes for this config."""
    return {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
            "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3", "Phi3ForCausalLM": "phi3"}[cfg["architectures"][0]]


def gguf_layout(cfg: dict) -> tuple[list, list]:
    """(metadata, tensors) as convert_hf_to_gguf.py writes this config (names and ggml shapes)."""
    arch = architecture(cfg)
    h, n_layer, n_head = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads") or n_head
    hd = cfg.get("head_dim") or h // n_head
    ff, vocab = cfg["intermediate_size"], cfg["vocab_size"]
    tied = cfg.get("tie_word_embeddings", arch.startswith("gemma"))
    meta = [("general.architecture", arch), ("general.name", cfg.get("_name", arch)), ("general.file_type", 1),
            ("general.alignment", ALIGN),
            (f"{arch}.context_length", int(cfg.get("max_position_embeddings", 4096))),
            (f"{arch}.embedding_length", h), (f"{arch}.block_count", n_layer), (f"{arch}.feed_forward_length", ff),
            (f"{arch}.attention.head_count", n_head), (f"{arch}.attention.head_count_kv", n_kv),
            (f"{arch}.attention.key_length", hd), (f"{arch}.attention.value_length", hd),
            (f"{arch}.rope.freq_base", float(cfg.get("rope_theta", 10000.0))),
            (f"{arch}.attention.layer_norm_rms_epsilon", float(cfg.get("rms_norm_eps", 1e-6))),
            (f"{arch}.vocab_size", vocab)]
    rope_dim = int(hd * cfg.get("partial_rotary_factor", 1.0))
    meta.append((f"{arch}.rope.dimension_count", rope_dim))
    if arch in ("gemma2", "gemma3", "phi3") and cfg.get("sliding_window"):
        meta.append((f"{arch}.attention.sliding_window", int(cfg["sliding_window"])))
    if arch == "gemma2":
        meta += [(f"{arch}.attn_logit_softcapping", float(cfg["attn_logit_softcapping"])),
                 (f"{arch}.final_logit_softcapping", float(cfg["final_logit_softcapping"]))]
    if arch == "phi3":
        meta.append((f"{arch}.rope.scaling.original_context_length", int(cfg.get("original_max_position_embeddings", 4096))))
    meta += _vocab(vocab)
    F32, F16 = TYPE_F32, TYPE_F16
    t = [("token_embd.weight", (h, vocab), F16)]
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type") == "llama3":
        t.append(("rope_freqs.weight", (rope_dim // 2,), F32))
    for il in range(n_layer):
        b = f"blk.{il}."
        t.append((b + "attn_norm.weight", (h,), F32))
        if arch == "phi3":
            t.append((b + "attn_qkv.weight", (h, n_head * hd + 2 * n_kv * hd), F16))
        else:
            t += [(b + "attn_q.weight", (h, n_head * hd), F16), (b + "attn_k.weight", (h, n_kv * hd), F16),
                  (b + "attn_v.weight", (h, n_kv * hd), F16)]
        if arch == "qwen2":
            t += [(b + "attn_q.bias", (n_head * hd,), F32), (b + "attn_k.bias", (n_kv * hd,), F32),
                  (b + "attn_v.bias", (n_kv * hd,), F32)]
        if arch in ("qwen3", "gemma3"):
            t += [(b + "attn_q_norm.weight", (hd,), F32), (b + "attn_k_norm.weight", (hd,), F32)]
        t.append((b + "attn_output.weight", (n_head * hd, h), F16))
        if arch in ("gemma2", "gemma3"):
            t.append((b + "post_attention_norm.weight", (h,), F32))
        t.append((b + "ffn_norm.weight", (h,), F32))
        if arch == "phi3":
            t.append((b + "ffn_up.weight", (h, 2 * ff), F16))
        else:
            t += [(b + "ffn_gate.weight", (h, ff), F16), (b + "ffn_up.weight", (h, ff), F16)]
        t.append((b + "ffn_down.weight", (ff, h), F16))
        if arch in ("gemma2", "gemma3"):
            t.append((b + "post_ffw_norm.weight", (h,), F32))
    t.append(("output_norm.weight", (h,), F32))
    if not tied:
        t.append(("output.weight", (h, vocab), F16))
    return meta, t


def read_config(model: str) -> dict:
    for base in MODELS_DIRS:
        path = base / model.replace("/", "--") / "config.json"
        if path.exists():
            cfg = json.loads(path.read_text())
            return {**cfg, "_name": model.split("/")[-1]}
    raise SystemExit(f"no config.json for {model} under {', '.join(map(str, MODELS_DIRS))}")


# ------------------------------------------------------------------------------------------------------------
# the settings grid
# ------------------------------------------------------------------------------------------------------------
BASE = {"n_ctx": 4096, "n_batch": 2048, "n_ubatch": 512, "n_parallel": 1, "type_k": "f16", "type_v": "f16",
        "flash_attn": "off", "mmap": True, "repack": True, "swa_full": False, "kv_unified": False}
GRID = (
    {}, {"n_ctx": 1024}, {"n_ctx": 16384}, {"flash_attn": "on"}, {"flash_attn": "on", "type_k": "q8_0", "type_v": "q8_0"},
    {"n_parallel": 4}, {"n_parallel": 4, "kv_unified": True}, {"mmap": False}, {"repack": False},
    {"mmap": False, "repack": False}, {"n_ubatch": 128, "n_batch": 512}, {"swa_full": True},
    {"flash_attn": "on", "n_ctx": 8192, "n_parallel": 2},
)
QUICK_GRID = ({}, {"mmap": False}, {"n_ctx": 16384, "flash_attn": "on"})


def kv_bytes_per_token(cfg: dict) -> int:
    n_head = cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // n_head
    return cfg["num_hidden_layers"] * 2 * (cfg.get("num_key_value_heads") or n_head) * hd * 2


def settings_for(cfg: dict, quant: str, quick: bool) -> list[dict]:
    grid = QUICK_GRID if quick or quant in ("F16", "Q8_0") else GRID
    out = []
    for extra in grid:
        s = {**BASE, **extra}
        if s["n_ctx"] * kv_bytes_per_token(cfg) > KV_BUDGET:
            continue
        out.append(s)
    return out


# ------------------------------------------------------------------------------------------------------------
# the child: runs inside the built venv, talks to llama.cpp through llama-cpp-python's ctypes bindings
# ------------------------------------------------------------------------------------------------------------
def _child_logging():
    import llama_cpp

    state = {"last": 1}

    @llama_cpp.llama_log_callback
    def callback(level, text, user_data):
        level = state["last"] if level == 5 else level  # GGML_LOG_LEVEL_CONT continues the previous line
        state["last"] = level
        if level != 1:  # everything but GGML_LOG_LEVEL_DEBUG (ggml.h): what llama.cpp prints by default
            sys.stderr.write(text.decode("utf-8", "replace"))
            sys.stderr.flush()

    llama_cpp.llama_log_set(callback, None)
    return callback


def child_quantize(src: str, dst: str, quant: str) -> int:
    import llama_cpp

    keep = _child_logging()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[quant]
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params)
    del keep
    return int(rc)


def child_load(path: str, s: dict) -> int:
    import llama_cpp

    keep = _child_logging()
    llama_cpp.llama_backend_init()
    mp = llama_cpp.llama_model_default_params()
    mp.n_gpu_layers = 0
    if hasattr(mp, "use_mmap"):
        mp.use_mmap = bool(s["mmap"])
    else:  # newer trees: load_mode (LLAMA_LOAD_MODE_MMAP = 1, NONE = 0)
        mp.load_mode = 1 if s["mmap"] else 0
    mp.use_extra_bufts = bool(s["repack"])
    model = llama_cpp.llama_model_load_from_file(path.encode(), mp)
    if not model:
        sys.stderr.write("CHILD: model load failed\n")
        return 1
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = s["n_ctx"], s["n_batch"], s["n_ubatch"], s["n_parallel"]
    cp.type_k, cp.type_v = GGML_TYPES[s["type_k"]], GGML_TYPES[s["type_v"]]
    if hasattr(cp, "flash_attn_type"):
        cp.flash_attn_type = {"on": 1, "off": 0, "auto": -1}[s["flash_attn"]]
    else:
        cp.flash_attn = s["flash_attn"] == "on"
    cp.swa_full, cp.kv_unified = bool(s["swa_full"]), bool(s["kv_unified"])
    cp.n_threads = cp.n_threads_batch = 1
    ctx = llama_cpp.llama_init_from_model(model, cp)
    rc = 0 if ctx else 2
    if ctx:
        llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(model)
    del keep
    return rc


# ------------------------------------------------------------------------------------------------------------
# the parent: build, write, quantize, load, collect cases
# ------------------------------------------------------------------------------------------------------------
def ensure_build(version: str) -> Path:
    venv = Path(os.environ.get("LLAMACPP_VENV") or f"/work/venvs/llcpp-{version}")
    py = venv / "bin" / "python"
    if py.exists() and subprocess.run([str(py), "-c", "import llama_cpp"], capture_output=True).returncode == 0:
        return py
    print(f"building llama-cpp-python {version} from its source archive into {venv} (CPU, GGML_NATIVE=OFF) ...",
          flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = dict(os.environ, CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF",
               CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2))
    subprocess.run(["nice", "-n", "10", str(py), "-m", "pip", "install", "--no-binary", "llama-cpp-python",
                    f"llama-cpp-python=={version}"], check=True, env=env)
    return py


def _run_child(py: Path, args: list[str], timeout: int = 1800) -> tuple[int, str]:
    proc = subprocess.run([str(py), __file__, "--child", *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    return proc.returncode, proc.stderr


def _quant_file(py: Path, work: Path, model: str, cfg: dict, quant: str) -> Path:
    slug = model.split("/")[-1].lower()
    f16 = work / f"{slug}-F16.gguf"
    if not f16.exists():
        meta, tensors = gguf_layout(cfg)
        write_gguf(f16, meta, tensors)
    if quant == "F16":
        return f16
    out = work / f"{slug}-{quant}.gguf"
    if not out.exists():
        t0 = time.time()
        rc, err = _run_child(py, ["quantize", str(f16), str(out) + ".part", quant])
        if rc != 0:
            raise RuntimeError(f"quantize {model} {quant} failed:\n{err[-2000:]}")
        os.replace(str(out) + ".part", out)
        print(f"  quantized {slug} to {quant} in {time.time() - t0:.0f}s", flush=True)
    return out


def _log_lines(stderr: str) -> str:
    """Only what llama.cpp printed (the child writes nothing else but its CHILD: lines)."""
    return "\n".join(line for line in stderr.splitlines() if line.strip() and not line.startswith("CHILD:"))


def case_of(version: str, build: int, model: str, quant: str, path: Path, s: dict, log: str, rc: int) -> dict:
    sys.path.insert(0, str(ROOT / "src"))
    from vram_detective.engines.llamacpp.log_parser import parse

    observed = parse(log)
    if rc != 0:
        observed["startup_failed"] = True
    parts = [f"c{s['n_ctx']}", f"np{s['n_parallel']}" + ("u" if s["kv_unified"] else ""), f"fa-{s['flash_attn']}",
             f"k{s['type_k']}", f"ub{s['n_ubatch']}", "mmap" if s["mmap"] else "nommap",
             "repack" if s["repack"] else "norepack"] + (["swafull"] if s["swa_full"] else [])
    settings = {"gguf_file": path.name, "quant": quant, "gguf_type": quant, **s, "n_gpu_layers": 0,
                "n_seq_max": s["n_parallel"], "binary": f"llama-cpp-python {version} (llama_model_load_from_file + "
                "llama_init_from_model)", "cpu_build": True, "vendored": VENDORED.get(version, "?"),
                "weights": "zero (real names, shapes, metadata; SentencePiece vocabulary of the real size)"}
    return {"id": f"llamacpp-cpu-b{build}-{model.split('/')[-1].lower()}-{quant.lower()}-" + "-".join(parts),
            "source": f"benchmarks/llamacpp_cpu_groundtruth.py {version} (llama-cpp-python {version} built from its "
                      f"source archive with GGML_NATIVE=OFF; {platform.processor() or platform.machine()}; "
                      f"{time.strftime('%Y-%m-%d')})",
            "engine": "llamacpp", "engine_version": f"b{build}", "engine_version_basis": "stated",
            "model": model, "gpu": None, "num_gpus": 0, "settings": settings, "observed": observed, "log": log,
            "tags": ["cpu-only", "zero-weights"], **_model_config(model)}


def _model_config(model: str) -> dict:
    """A model the built-in catalog lacks carries its config.json (SCHEMA.md `model_config`)."""
    sys.path.insert(0, str(ROOT / "src"))
    from vram_detective.api import model_source

    try:
        model_source(model, "catalog")
        return {}
    except LookupError:
        return {"model_config": {k: v for k, v in read_config(model).items() if not k.startswith("_")}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("version", help="llama-cpp-python release, e.g. 0.3.16")
    ap.add_argument("--build", type=int, help="the llama.cpp build it vendors (known: %s)" % BUILDS)
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    ap.add_argument("--quants", default="F16,Q8_0,Q4_K_M,Q4_0")
    ap.add_argument("--work", default="/tmp/llamacpp-cpu-gt")
    ap.add_argument("--out", help="default groundtruth/cpu/llamacpp_b<build>.jsonl")
    ap.add_argument("--quick", action="store_true", help="three settings per file")
    a = ap.parse_args(argv)
    build = a.build or BUILDS.get(a.version)
    if build is None:
        ap.error(f"--build is needed for llama-cpp-python {a.version} (known: {BUILDS})")
    py = ensure_build(a.version)
    work = Path(a.work) / a.version
    work.mkdir(parents=True, exist_ok=True)
    out = Path(a.out or ROOT / "groundtruth" / "cpu" / f"llamacpp_b{build}.jsonl")
    partial = out.with_suffix(".jsonl.part")  # each load appended as it ends: an interrupted run keeps its loads
    partial.write_text("")
    cases, t0 = [], time.time()
    for model in a.models.split(","):
        cfg = read_config(model)
        for quant in a.quants.split(","):
            path = _quant_file(py, work, model, cfg, quant)
            for s in settings_for(cfg, quant, a.quick):
                rc, err = _run_child(py, ["load", str(path), json.dumps(s)], timeout=900)
                case = case_of(a.version, build, model, quant, path, s, _log_lines(err), rc)
                cases.append(case)
                with open(partial, "a") as f:
                    f.write(json.dumps(case) + "\n")
                obs = case["observed"]
                print(f"{case['id'][len('llamacpp-cpu-'):]:<90} rc={rc} "
                      f"model={sum(v for k, v in obs.items() if k.endswith('_model_buffer_mib')):9.2f} "
                      f"kv={obs.get('cpu_kv_buffer_mib', 0):8.2f} compute={obs.get('cpu_compute_buffer_mib', 0):8.2f}",
                      flush=True)
        for f in work.glob(f"{model.split('/')[-1].lower()}-*.gguf"):
            f.unlink()  # the next model's files fit the disk
    out.write_text("".join(json.dumps(c) + "\n" for c in cases))
    partial.unlink()
    print(f"{len(cases)} loads in {time.time() - t0:.0f}s -> {out}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        if sys.argv[2] == "quantize":
            sys.exit(child_quantize(*sys.argv[3:6]))
        sys.exit(child_load(sys.argv[3], json.loads(sys.argv[4])))
    sys.exit(main())
