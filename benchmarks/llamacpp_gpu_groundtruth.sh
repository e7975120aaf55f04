#!/usr/bin/env bash
# Real llama.cpp buffer lines on this machine's GPU, as ground truth (no network needed).
#   benchmarks/llamacpp_gpu_groundtruth.sh [SDIST.tar.gz] [OUT_DIR]
# SDIST: the llama-cpp-python source archive (its vendor/llama.cpp is built; default: the first
# llama_cpp_python-*.tar.gz under .carry/ or shared/); OUT_DIR: default $OUT, else ./llamacpp-gt.
# BUILD (env): the llama.cpp build number that sdist vendors (default 6150 = llama-cpp-python 0.3.16; a tree
# without git prints 'build: 0', so the number is recorded as given).
# Builds CUDA for the card found only (-DCMAKE_CUDA_ARCHITECTURES=native) and only llama-server; writes tiny
# GGUFs (benchmarks/llamacpp_tiny_gguf.py); starts llama-server per setting, waits for /health, stops it;
# saves OUT_DIR/llamacpp-gpu.jsonl (SCHEMA.md llama.cpp cases), the logs, and build.log. Budget: < 10 min
# on 16 cores (the build takes most of it; FA kernels for f16 and q8_0 only, the default).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SDIST=${1:-$(ls "$ROOT"/.carry/llama_cpp_python-*.tar.gz "$ROOT"/shared/llama_cpp_python-*.tar.gz 2>/dev/null | head -1)}
OUT_DIR=${2:-${OUT:-$ROOT/llamacpp-gt}}
BUILD=${BUILD:-6150}
JOBS=${JOBS:-$(nproc)}
[ -f "$SDIST" ] || { echo "no llama-cpp-python sdist (give its path)"; exit 2; }
mkdir -p "$OUT_DIR/logs"
WORK=$(mktemp -d)
t0=$(date +%s)
tar xzf "$SDIST" -C "$WORK"
SRC=$(ls -d "$WORK"/llama_cpp_python-*/vendor/llama.cpp)
cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=native \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
  >"$OUT_DIR/build.log" 2>&1 || { tail -30 "$OUT_DIR/build.log"; exit 1; }
cmake --build "$WORK/build" -j "$JOBS" --target llama-server >>"$OUT_DIR/build.log" 2>&1 \
  || { tail -40 "$OUT_DIR/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
SERVER="$WORK/build/bin/llama-server"
# -fa is a bare switch before ~b6325 and takes on|off|auto after (releases.py flash_attn.default)
if "$SERVER" --help 2>/dev/null | grep -q -- '--flash-attn \[on|off|auto\]'; then FA_ON="-fa on" FA_OFF="-fa off"
else FA_ON="-fa" FA_OFF=""; fi
G="$WORK/gguf"
python3 "$ROOT/benchmarks/llamacpp_tiny_gguf.py" "$G" >/dev/null

run() {  # run NAME ARGS...: llama-server until /health answers (or 90 s), then stop it
  local name=$1; shift
  local port=$(( 18000 + RANDOM % 2000 ))
  echo "$SERVER $* --port $port" | sed "s#$WORK/##g" >"$OUT_DIR/logs/$name.cmd"
  "$SERVER" "$@" --port "$port" >"$OUT_DIR/logs/$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 180); do
    python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=1)" \
      2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  echo "$name: $(grep -c 'buffer size' "$OUT_DIR/logs/$name.log") buffer lines"
}

L="$G/tiny-llama.gguf" M="$G/tiny-moe.gguf" S="$G/tiny-gemma3.gguf" P="$G/tiny-mmproj.gguf"
run llama-ngl99-c4096-np1-fa-off -m "$L" -ngl 99 -c 4096 -np 1 $FA_OFF
run llama-ngl99-c4096-np4-fa-on-q8kv -m "$L" -ngl 99 -c 4096 -np 4 $FA_ON -ctk q8_0 -ctv q8_0
run llama-ngl3-c2048-fa-off -m "$L" -ngl 3 -c 2048 -np 1 $FA_OFF
run llama-ngl99-c4096-nokvo -m "$L" -ngl 99 -c 4096 -np 1 $FA_ON --no-kv-offload
run llama-ngl99-c4096-nommap -m "$L" -ngl 99 -c 4096 -np 1 $FA_ON --no-mmap
run llama-ngl99-c4096-ub128 -m "$L" -ngl 99 -c 4096 -np 1 $FA_OFF -ub 128
run llama-mmproj -m "$L" -ngl 99 -c 4096 -np 1 $FA_ON --mmproj "$P"
run moe-ngl99-c4096-fa-on -m "$M" -ngl 99 -c 4096 -np 1 $FA_ON
run moe-ngl99-c4096-ncmoe3 -m "$M" -ngl 99 -c 4096 -np 1 $FA_ON --n-cpu-moe 3
run gemma3-ngl99-c8192-np2-fa-on -m "$S" -ngl 99 -c 8192 -np 2 $FA_ON
run gemma3-ngl99-c8192-swa-full -m "$S" -ngl 99 -c 8192 -np 1 $FA_ON --swa-full
run gemma3-ngl4-c8192-fa-off -m "$S" -ngl 4 -c 8192 -np 1 $FA_OFF
PYTHONPATH="$ROOT/src" python3 "$ROOT/benchmarks/llamacpp_gpu_groundtruth.py" to-jsonl "$BUILD" "$OUT_DIR/logs" \
  >"$OUT_DIR/llamacpp-gpu.jsonl"
echo "cases: $(wc -l <"$OUT_DIR/llamacpp-gpu.jsonl"), total $(( $(date +%s) - t0 )) s"
(cd "$OUT_DIR" && tar czf logs.tgz logs && rm -rf logs)  # $OUT returns files two folders down at most
rm -rf "$WORK"
