"""Copy the ground truth the tests and the scorer read from ../shared into groundtruth/ (this repo).

What is copied (python scripts/sync_groundtruth.py [SHARED], SHARED defaulting to ../shared):
  ../shared/groundtruth/{dev,dev-vllm-more,dev-vllm-modern,dev-sglang,dev-llamacpp}.jsonl, SCHEMA.md -> groundtruth/
  ../shared/gpus/observed.jsonl                                              -> groundtruth/gpus/
  ../shared/models/safetensors_total_size.jsonl and the config.json files
  the tests read (MODEL_CONFIGS below)                                       -> groundtruth/models/

The project holds facts from elsewhere, never others' sentences. So each case keeps its fields (id, source,
engine, version, model, gpu, settings, observed, tags) and:
- `notes` is dropped: it is the case author's prose; the figures it qualifies are in `observed`, `tags` and
  `settings`. The one fact tests need from it, the engine path the author read off the worker files
  ('engine path V1'), is kept as a field: `engine_path` ("v0" / "v1"), only where the notes state one path.
- `log` keeps only what programs printed, line by line:
    * engine log records: a level / timestamp / logger prefix (vLLM 'INFO 05-28 08:00:26 [x.py:1]',
      '(EngineCore_DP0 pid=1)', SGLang '[2025-01-01 12:00:00 TP0]', Ollama 'time=... level=...',
      llama.cpp 'llama_context: ...', 'load_tensors: ...', journald 'Mon 1 00:00:00 host prog[1]:');
    * engine messages quoted without their prefix, recognised by the message's own shape
      ('Model loading took ...', 'GPU KV cache size: ...', 'Load weight end. ...', ...: ENGINE_MESSAGES);
    * nvidia-smi output (its table rows and --query CSV rows) and the device lines CUDA prints;
    * the launch command (vllm serve ..., python -m vllm..., llama-server ..., docker run ...): the settings
      the run was given, not a sentence.
  An engine message that the author wrapped in markdown (a bullet, `code`, **bold**, a '> ' quote) or
  after a label of their own ('- This PR: # GPU blocks: 7351', '[copy 1234] INFO ...') is kept as the
  engine printed it: the wrapping is dropped, the message stays. Everything else (prose, markdown tables
  and headings, the author's summaries and arithmetic) is dropped.
`gpus/observed.jsonl` keeps each reading's gpu, totals and source; its `note` (the collector's prose around the
line the total was read from) becomes two facts: `ecc` ("on" / "off", from the ECC column of the quoted
nvidia-smi row: a count means ECC is on, 'Off' off) and `os` ("windows" where the note places the reading
under Windows or WSL and nowhere says Linux: those report the whole board, not the Linux driver's total).
The parser must read the same figures from the filtered log as from the original wherever a figure came
from a program's line; figures that only an author's table or sentence gave are listed in
tests/test_forensics_dev.py NOT_IN_THE_LOG (they stay in `observed`, which is the case's record).

Supplements (scripts/case_supplements.json, kept in this repo): what a case cannot say by itself for a plan -
the model's config.json when it names a file no model source holds, the release its log format shows, a setting
its log implies - keyed by case id, each with its `basis`. They are merged into the copied case on every sync
(SUPPLEMENT_FIELDS; the basis becomes `supplement_basis`) and documented in the SCHEMA.md copy (SUPPLEMENT_SCHEMA).
"""
from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
TARGET = ROOT / "groundtruth"

CASE_FILES = ("dev.jsonl", "dev-vllm-more.jsonl", "dev-vllm-modern.jsonl", "dev-sglang.jsonl", "dev-llamacpp.jsonl")
MODEL_CONFIGS = (  # the config.json files tests/test_kv_groups.py reads
    "Qwen--Qwen2.5-7B-Instruct", "google--gemma-2-9b", "google--gemma-3-1b-it", "google--gemma-3-27b-it",
    "google--gemma-3-4b-it", "microsoft--Phi-3-mini-4k-instruct", "mistralai--Mistral-7B-Instruct-v0.2",
    "openai--gpt-oss-120b", "openai--gpt-oss-20b",
)
DROPPED_FIELDS = ("notes",)
SUPPLEMENTS = Path(__file__).resolve().parent / "case_supplements.json"
# fields a supplement may set on a case (the case's own value replaced), besides its `basis`
SUPPLEMENT_FIELDS = ("model_config", "plan_settings", "engine_version", "engine_version_basis")
SUPPLEMENT_SCHEMA = """
## Supplementary fields (this repository)
Merged by `scripts/sync_groundtruth.py` from `scripts/case_supplements.json` where a case cannot say by itself
what a plan needs; absent elsewhere. Not figures: `observed` stays what the engine printed.

| field | type | meaning |
|---|---|---|
| `model_config` | object | the model's config.json values (Hugging Face names) when `model` names a file no model source holds (a GGUF repo, an unpublished checkpoint); the scorer plans with it instead of resolving `model` |
| `plan_settings` | object | settings in the engine's own names that the log implies but does not print as a setting (e.g. llama.cpp `override_tensor`, `gguf_type`); applied over the settings read from `settings` and the log |
| `engine_version`, `engine_version_basis` | string | replaced by a release the tool models (e.g. `b5800`, `ollama 0.12.0`) when the case states only a range or a description; basis `log-format` |
| `supplement_basis` | string | why the supplement holds (the source of the config, the log lines that date the build) |
"""

# --- what a program printed ---------------------------------------------------------------------------------

# wrappers a program or a log collector puts in front of a record (kept as they are)
_COLLECTOR = re.compile(
    r"(?:\s+"
    r"|[A-Z][a-z]{2} +\d+ \d\d:\d\d:\d\d \S+ [\w.-]+\[\d+\]:\s*"  # journald
    r"|vLLM STDOUT:\s*"  # a wrapper script's stdout relay
    r"|\([^()]*\bpid=\d+[^)]*\)\s*"  # vLLM worker / Ray actor
    r"|\[Stage-\d+\]\s*"  # vLLM-Omni stage
    r"|\[(?:Info|Debug|Warning|Error)\] - "  # LLamaSharp's logger
    r")*"
)
_RECORD = re.compile(
    r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\b"  # vLLM / Python logging
    r"|[\w.]+ \d+ (?:INFO|ERROR|WARNING|DEBUG)\s"  # xinference's logger
    r"|\.\.\.\w* model weights took"  # a record whose start the excerpt cut
    r"|\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d"  # SGLang and other timestamped loggers
    r"|time=\d{4}-\d\d-\d\dT"  # Ollama
    r"|\d+\.\d\d\.\d{3}\.\d{3} [IWEDT] "  # llama.cpp's timestamped common log
    r"|(?:llama|llm|ggml|gguf|clip|mtmd)_\w*[:(]"  # llama.cpp functions
    r"|(?:load_tensors|print_info|load|init|graph_reserve|sched_reserve|create_memory|common_\w+|srv|slot|main|"
    r"load_model|llama_server|set_abort_callback)\s*:?\s"
    r"|(?:Traceback \(most recent call last\)|\w+(?:Error|Exception): |File \"|raise |torch\.\w+)"
    r"|\[\w+\.py:\d+\]|\w+\.py:\d+\]"  # vLLM records whose level was cut
)
ENGINE_MESSAGES = re.compile(
    r"(?:"
    # vLLM
    r"Loading model weights took \d|Model loading took:? \d|Model weights loaded|model weights take \d"
    r"|Memory profiling\b|the current vLLM instance can use|non_torch_memory takes"
    r"|#? ?(?:GPU|CPU|cuda|CUDA) blocks: \d|GPU blocks: \d|Maximum concurrency for [\d,]+ tokens"
    r"|Available KV cache memory: \d|GPU KV cache size: [\d,]+ tokens|Free memory on device"
    r"|Desired GPU memory utilization|Actual usage is|(?:and )?[\d.]+ GiB for (?:CUDAGraph|weight|peak)"
    r"|Current kv cache memory in use|gpu_memory_utilization config with|to fit into requested memory"
    r"|fully utilize gpu memory|\d+ bytes\"?\.?$|GPU memory utilization is \("
    r"|for weight, [\d.]+ GiB|memory, and [\d.]+ GiB for CUDAGraph"
    r"|CUDA graph (?:pool memory|memory profiling)|Estimated CUDA graph memory|Profiling CUDA graph memory"
    r"|difference: [\d.]+ GiB|Graph capturing finished|Capturing (?:CUDA )?graphs|CUDAGraphMode\."
    r"|Without it, CUDA graph memory|which may require lowering|re-enabling it|--gpu-memory-utilization from"
    r"|backend \w+ \(support|setting cudagraph_mode|torch\.compile takes|Dynamo bytecode transform"
    r"|init engine \(profile|The model's max seq len|Try increasing `gpu_memory_utilization`"
    r"|No available memory for the cache blocks|Using default MoE config|Cache shape torch"
    r"|A_A800-SXM4-80GB\.json'\]|Initializing (?:an?|a V[01]) LLM engine|non-default args"
    r"|vLLM(?: API)? server version|Starting to load model|Using max model len|Chunked prefill is enabled"
    r"|(?:Forcing|Setting) (?:kv cache|attention) block size|Setting kv cache block size"
    r"|enable_lora=|Overriding num_gpu_blocks|Application startup complete|Uvicorn running on"
    # SGLang
    # (an author's condensed rendering of a line - labels or fields dropped - is not the engine's line: the
    # KV and scheduler lines count only with the wording SGLang prints, e.g. memory_pool.py 'K size:')
    r"|Load weight (?:begin|end)\.|KV Cache is allocated\. (?:dtype: \S+, )?#tokens: \d+, K?V? ?size: "
    r"|Memory pool end\.|max_total_num_tokens=\d+, (?:chunked_prefill_size|max_prefill_tokens)="
    r"|Capture cuda graph (?:begin|end)\.|The server is fired up|server_args|Init torch distributed"
    r"|avail mem=[\d.]+ GB|K size: [\d.]+ GB|max_running_requests=\d"
    r"|ValueError: Loaded weights leave no GPU memory"
    # llama.cpp
    r"|Device \d+: .*compute capability|build: \d+ \(|\.{10,}$|n_ctx=\d+ n_batch="
    r"|ggml_cuda_init|\w+\.context_length u32"
    r")"
)
_SMI = re.compile(
    r"(?:\|\s+\d+\s+(?:NVIDIA|Tesla|Quadro)\b.*\|"  # GPU row
    r"|\|\s*(?:N/A|\d+%)\s+\d+C\s+P\d+.*MiB\s*/\s*\d+MiB.*\|"  # memory row
    r"|\|\s+\d+\s+N/A\s+N/A\s+\d+\s+[CG]\s+.*MiB\s*\|"  # process row
    r"|[+|][-=+|\s]+[+|]$|\|\s+(?:NVIDIA-SMI|GPU\s+Name|Fan\s+Temp|Processes:|GPU\s+GI)"  # frame, headers
    r"|index, .*(?:memory|name)|name, memory|pid, |(?:[\w./-]+, )*\d+ ?MiB(?:, \d+ ?MiB)*$"  # --query CSV
    r"|\d+, (?:NVIDIA|Tesla)[^,]*, [\d.]+$"  # --query name, driver
    r"|\d+, (?:NVIDIA|Tesla)[^,]*, [\d.]+, "
    r"|\d+, /\S+, \d+ MiB$"
    r"|\d+: (?:NVIDIA|Tesla)[\w -]+ \d+MiB$"  # a one-line listing of GPUs and totals
    r"|\S+\s+\d+MiB$"  # --query-compute-apps process, used
    r"|vllm-[\w.+-]+\.whl$"  # the wheel that was installed
    r")"
)
_COMMAND = re.compile(
    r"(?:\$ )?(?:(?:[A-Z][A-Z0-9_]*=\S+ )*(?:nohup )?(?:vllm serve|vllm\s|python3? (?:-O -u )?-m vllm|python3? -m sglang"
    r"|docker run|\./?\S*llama-(?:server|cli|bench)\b|\./build/bin/llama-|export [A-Z_]+=|VLLM_USE_V1=1 vllm"
    r"|CUDA_VISIBLE_DEVICES=\S+ python|nvidia-smi\b|python3? -c )"
    r"|--[\w-]+(?:[ =]\S+)?(?: --[\w-]+(?:[ =]\S+)?)*\s*\\?$"  # continuation of a command
    r"|-\w+ \S+.*\\$|--\w[\w-]* .*\\$)"
)
# an author's wrapping around a program's text: a bullet, a quote, a label, **bold**, `code`
_AUTHOR_LABEL = re.compile(r"^\s*(?:[-*>▎\"]+\s*|\[(?:copy|companion id) [^\]]*\]\s*|[\w .]+:\s+(?=[#`]))+")
_CODE_SPAN = re.compile(r"`([^`]+)`")
# engine messages an author quoted inside a sentence, with where each one ends
_QUOTED = re.compile(
    r"#\s*(?:GPU|CPU|cuda|CUDA) blocks: \d+(?:, # CPU blocks: \d+)?"
    r"|(?:Loading model weights|Model loading) took:? [\d.]+ ?(?:GiB|GB|MB)(?: memory)?(?: and [\d.]+ seconds)?"
    r"|(?:ValueError: )?To serve at least one request with the models?'s? max seq len .*$"
)
_COMMAND_START = re.compile(r"(?:[A-Z][A-Z0-9_]*=\S+ )*(?:vllm serve|python3? -m vllm\.entrypoints\.[\w.]+)(?= )")


def _body(line: str) -> str:
    return line[_COLLECTOR.match(line).end():]


def _is_message(text: str) -> bool:
    body = _body(text)
    return bool(body.strip()) and bool(_RECORD.match(body) or ENGINE_MESSAGES.match(body) or _SMI.match(body.rstrip()))


def is_program_line(line: str) -> bool:
    """True when `line` is what an engine, nvidia-smi, CUDA or the launch command printed, as printed."""
    return _is_message(line) or bool(_COMMAND.match(_body(line)))


def _command_in(text: str, start: int) -> str:
    """A launch command inside a sentence: its words, then flags and their values, up to the first other word."""
    words = text[start:].split()
    head = len(_COMMAND_START.match(text, start).group(0).split())
    if words[head - 1] == "serve" and head < len(words) and not words[head].startswith("-"):
        head += 1  # the model
    kept, i = words[:head], head
    while i < len(words) and words[i].startswith("-"):
        kept.append(words[i])
        if "=" not in words[i] and i + 1 < len(words) and not words[i + 1].startswith("-"):
            kept.append(words[i + 1])
            i += 1
        i += 1
    return " ".join(kept)


def _unwrapped(line: str) -> list[str]:
    """The program's text inside an author's wrapping ('- vLLM 0.2.3: `# GPU blocks: 1464`'), if any."""
    if line.lstrip().startswith("|"):  # a markdown table: the author's
        return []
    stripped = _AUTHOR_LABEL.sub("", line, count=1).replace("**", "").strip()
    if stripped != line.strip() and is_program_line(stripped) and "`" not in stripped:
        return [stripped]
    spans = [span.strip() for span in _CODE_SPAN.findall(line)]
    found = [span for span in spans if _is_message(span) or _COMMAND_START.match(span)]
    if found:
        return found
    found = [match.group(0).rstrip(").") if match.group(0).count("(") < match.group(0).count(")")
             else match.group(0) for match in _QUOTED.finditer(line)]
    command = _COMMAND_START.search(line)
    if command:
        found.insert(0, _command_in(line, command.start()))
    return found


def filter_log(log: str) -> str:
    """The lines of `log` that programs printed (module docstring); the author's text around them dropped."""
    kept = []
    for line in log.splitlines():
        if is_program_line(line) and not line.lstrip().startswith(("- ", "* ", "> ")):
            kept.append(line.rstrip())
        else:
            kept.extend(_unwrapped(line))
    return "\n".join(kept)


def clean_case(case: dict) -> dict:
    out = {key: value for key, value in case.items() if key not in DROPPED_FIELDS}
    paths = set(re.findall(r"engine path (V[01])", case.get("notes", "")))
    if len(paths) == 1:
        out["engine_path"] = paths.pop().lower()
    out["log"] = filter_log(case.get("log", ""))
    return out


# --- GPU readings -------------------------------------------------------------------------------------------

# an nvidia-smi GPU row: | idx  NAME  Persistence | Bus-Id  Disp.A | Volatile Uncorr. ECC |
_SMI_ECC = re.compile(r"\|\s+\d+\s+.+?\s+(?:On|Off)\s+\|\s+\S+\s+(?:On|Off)\s+\|\s+(\S+)\s+\|")


def clean_gpu_reading(record: dict) -> dict:
    note = record.get("note", "")
    out = {key: value for key, value in record.items() if key != "note"}
    row = _SMI_ECC.search(note.split("Source line: ", 1)[-1])
    if row and (row.group(1) == "Off" or row.group(1).isdigit()):
        out["ecc"] = "off" if row.group(1) == "Off" else "on"
    lowered = note.lower()
    if ("windows" in lowered or "wsl" in lowered) and "linux" not in lowered:
        out["os"] = "windows"
    return out


# --- copying ------------------------------------------------------------------------------------------------

def supplemented(case: dict, supplements: dict) -> dict:
    """The case with its supplement's fields (SUPPLEMENT_FIELDS) and `supplement_basis`, when it has one."""
    extra = supplements.get(case.get("id"))
    if not extra:
        return case
    unknown = set(extra) - set(SUPPLEMENT_FIELDS) - {"basis"}
    if unknown:
        raise ValueError(f"{case['id']}: supplement fields {sorted(unknown)} (allowed: {SUPPLEMENT_FIELDS})")
    out = dict(case, **{key: extra[key] for key in SUPPLEMENT_FIELDS if key in extra})
    out["supplement_basis"] = extra["basis"]
    return out


def _copy_cases(source: Path, target: Path, supplements: dict) -> tuple[int, int, int]:
    cases = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    cleaned = [supplemented(clean_case(case), supplements) for case in cases]
    target.write_text("".join(json.dumps(case, ensure_ascii=False) + "\n" for case in cleaned), encoding="utf-8")
    before = sum(len(case.get("log", "").splitlines()) for case in cases)
    after = sum(len(case["log"].splitlines()) for case in cleaned)
    return len(cases), before, after


def main(argv: list[str]) -> int:
    global SHARED
    if argv:
        SHARED = Path(argv[0]).resolve()
    if not SHARED.is_dir():
        print(f"error: {SHARED} not found (give the shared/ folder: python scripts/sync_groundtruth.py PATH)",
              file=sys.stderr)
        return 1
    (TARGET / "gpus").mkdir(parents=True, exist_ok=True)
    supplements = json.loads(SUPPLEMENTS.read_text(encoding="utf-8"))
    for name in CASE_FILES:
        count, before, after = _copy_cases(SHARED / "groundtruth" / name, TARGET / name, supplements)
        print(f"{name}: {count} cases, log lines {before} -> {after}")
    schema = (SHARED / "groundtruth" / "SCHEMA.md").read_text(encoding="utf-8")
    (TARGET / "SCHEMA.md").write_text(schema.rstrip("\n") + "\n" + SUPPLEMENT_SCHEMA, encoding="utf-8")
    readings = [json.loads(line) for line in (SHARED / "gpus" / "observed.jsonl").read_text(encoding="utf-8").splitlines()
                if line.strip()]
    (TARGET / "gpus" / "observed.jsonl").write_text(
        "".join(json.dumps(clean_gpu_reading(r), ensure_ascii=False) + "\n" for r in readings), encoding="utf-8")
    models = TARGET / "models"
    models.mkdir(exist_ok=True)
    shutil.copyfile(SHARED / "models" / "safetensors_total_size.jsonl", models / "safetensors_total_size.jsonl")
    for folder in MODEL_CONFIGS:
        (models / folder).mkdir(exist_ok=True)
        shutil.copyfile(SHARED / "models" / folder / "config.json", models / folder / "config.json")
    print(f"copied SCHEMA.md, gpus/observed.jsonl, models/safetensors_total_size.jsonl, {len(MODEL_CONFIGS)} configs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
