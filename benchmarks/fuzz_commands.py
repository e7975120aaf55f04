"""The fit / compare / logs / score half of benchmarks/fuzz.py: random targets, engine sets and inputs through the
library's own calls (what the command line and the web API answer), with each answer's invariants:

- fit (four engines): every candidate's figures are not negative, its intervals lie within [0, the card] and
  contain their point, and its launch line, read back as a pasted line and explained, gives the same figures;
- compare (random engine sets and releases): each column is explain's answer for that engine;
- logs (mutated real logs of groundtruth/*.jsonl: dropped, repeated and cut lines, mutated numbers, byte noise,
  engines mixed, huge numbers, CR / CRLF; nvidia-smi text beside them): no negative figure;
- score (malformed ground-truth lines): an answer, never a bug.

Each check returns a list of violations (empty: the answer keeps every invariant)."""
from __future__ import annotations

import glob
import json
import math
import random
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GIB, MIB = 1 << 30, 1 << 20

# figures that may be negative by meaning: a difference, an error, a saving, a margin below the target
SIGNED = re.compile(r"(^|_)(gap|error|err|delta|margin|saving|savings|whatif|difference|relative|change|shortfall|"
                    r"diff|remaining)(_|$)")  # remaining: nvidia-smi's reading less the parts (negative: they exceed it)
FIGURE = re.compile(r"(_gib|_mib|_bytes|_tokens|_blocks|concurrency|^bytes|^gib|^tokens)$")


def negatives(value, path: str = "") -> list[str]:
    """Every figure (a key ending _gib, _mib, _bytes, _tokens, _blocks, concurrency) below zero in a JSON answer;
    keys naming a signed quantity (gaps, errors, deltas, margins, savings) are left alone, with what is under them."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            key = str(key)
            if SIGNED.search(key.lower().replace(" ", "_")):
                continue
            if isinstance(item, (int, float)) and not isinstance(item, bool):
                if FIGURE.search(key) and (item < 0 or (isinstance(item, float) and math.isnan(item))):
                    found.append(f"{path}.{key} = {item}")
            else:
                found += negatives(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += negatives(item, f"{path}[{index}]")
    return found


# --- fit ---------------------------------------------------------------------------------------------------------

FIT_CONTEXT = (["4k", "8k", "32k", "128k", 2048, 100_000, None, None], ["1", "0", "-1", "nan", "1e308", "9" * 40, "32q"])
FIT_CONCURRENCY = ([1, 2, 4, 8, 64, 0.5, 2.5, None, None], [0, -1, float("nan"), float("inf"), 1e308])
FIT_MEMORY = ([None] * 6 + ["20GiB", "8GB", "70GiB"], ["0", "-1GiB", "1e30GiB", "x"])
FIT_GPUS = ([1] * 9 + [2, 3, 4, 8], [0, -1, 1000, 1 << 40])
FIT_TOP = ([5, 5, 1, 3], [0, -1, 10 ** 9])
FIT_TARGET = {"context": FIT_CONTEXT, "concurrency": FIT_CONCURRENCY, "max_gpu_memory": FIT_MEMORY, "gpus": FIT_GPUS,
              "top": FIT_TOP}


def random_fit(rng: random.Random, models: list[str], gpus: list[str], engine: str, flags: dict) -> dict:
    """A fit call's keywords: a target, a GPU count, a few of the engine's own settings (hostile one time in ten)."""
    from vram_detective.engines import get_engine

    known = list(get_engine(engine).releases.known)
    call = {"model": rng.choice(models), "gpu": rng.choice(gpus), "engine": engine,
            "engine_version": rng.choice(known[-4:] + [None, None])}
    hostile = rng.choice(sorted(FIT_TARGET)) if rng.randrange(6) == 0 else None  # one target value in six cases
    for key, (sane, bad) in FIT_TARGET.items():
        call[key] = rng.choice(bad if key == hostile else sane)
    for key in rng.sample(sorted(flags), rng.randint(0, 2)):
        sane, bad = flags[key]
        call[key] = rng.choice(bad if bad and rng.randrange(10) == 0 else sane)
    return {key: value for key, value in call.items() if value is not None or key in ("model", "gpu")}


def run_fit(call: dict):
    from vram_detective import library

    settings = {key: value for key, value in call.items() if key not in ("model", "gpu")}
    return library.fit(call["model"], call["gpu"], **settings)


def card_limits(gpu_name: str) -> tuple[float, float]:
    """(GiB, MiB) the card has: the larger of CUDA's total and nvidia-smi's."""
    from vram_detective.hardware import find_gpu

    gpu = find_gpu(gpu_name)
    total = max(gpu.cuda_total_bytes, (gpu.nvidia_smi_total_mib or 0) * MIB)
    return total / GIB, total / MIB


def interval_problems(interval: dict, card_gib: float, card_mib: float, where: str) -> list[str]:
    """An interval lies within [0, the card] (GiB / MiB figures) and contains its point."""
    name = str(interval.get("figure") or interval.get("key") or "")
    low, value, high = interval.get("low"), interval.get("value"), interval.get("high")
    if not all(isinstance(x, (int, float)) for x in (low, value, high)):
        return [f"{where} interval {name}: not numbers {low}, {value}, {high}"]
    found = []
    rounding = 1e-3 * max(1.0, abs(value))
    if not (low - rounding <= value <= high + rounding):
        found.append(f"{where} interval {name}: {value} outside [{low}, {high}]")
    if low < 0:
        found.append(f"{where} interval {name}: low {low} < 0")
    limit = card_gib if name.endswith("_gib") else card_mib if name.endswith("_mib") else None
    if limit is not None and high > limit * 1.0001:
        found.append(f"{where} interval {name}: high {high} > the card's {limit:.1f}")
    return found


def candidates(answer: dict) -> list[dict]:
    """Every candidate a fit answer lists (vLLM/SGLang `candidates` and `nearest`, llama.cpp `answers`)."""
    return [c for key in ("candidates", "nearest", "answers") for c in (answer.get(key) or []) if isinstance(c, dict)]


def fit_problems(call: dict, answer: dict, relaunch_one_in: int, rng: random.Random) -> list[str]:
    found = []
    card_gib, card_mib = card_limits(call["gpu"])
    for index, candidate in enumerate(candidates(answer)):
        where = f"candidate {index + 1}"
        if candidate.get("startup_failed") and candidate.get("feasible"):
            found.append(f"{where}: offered as feasible but explain says it does not start")
        if candidate.get("starts") is False or candidate.get("refused") or candidate.get("startup_failed"):
            continue
        found += [f"{where}: negative {item}" for item in negatives(candidate)]
        for interval in [candidate.get("interval")] + list(candidate.get("intervals") or []):
            if isinstance(interval, dict):
                found += interval_problems(interval, card_gib, card_mib, where)
        if candidate.get("command") and rng.randrange(relaunch_one_in) == 0:
            found += relaunch_problems(call, answer, candidate, where)
    return found


# figures a candidate prints that its launch line, explained, must give again (vLLM/SGLang; llama.cpp per GPU)
SAME = ("weights_gib", "kv_cache_gib", "kv_cache_tokens", "max_concurrency", "nvidia_smi_used_mib")


def relaunch_problems(call: dict, answer: dict, candidate: dict, where: str) -> list[str]:
    """The candidate's launch line read back as the web page reads a pasted line, on the same GPU and release,
    explained: the same figures."""
    from vram_detective import errors
    from vram_detective.render import to_json
    from vram_detective.web import service

    version = answer.get("engine_version") or candidate.get("engine_version") or call.get("engine_version")
    line = candidate["command"]
    named = re.search(r" -m (\S+?)-([A-Z0-9_]+)\.gguf ", line + " ")
    params = {"line": line, "gpu": call["gpu"], "engine": call["engine"], "version": version}
    if named:  # llama.cpp's line names the GGUF file to fetch (not at hand): the model and its mix instead
        params.update(line=line.replace(named.group(0).rstrip(), " "), model=call["model"], gguf_type=named.group(2))
    devices = candidate.get("vram_per_gpu_mib") or {}
    if len(devices) > 1 and " -dev " not in line:  # llama.cpp takes every GPU it sees: the machine fit was asked about
        params["line"] += " -dev " + ",".join(devices)
    try:
        explained = to_json(service.explain(service.read_request(params, service.Policy())))
    except Exception as error:  # noqa: BLE001 - a line the tool printed must read back
        if errors.kind(error) == errors.BUG:
            raise
        return [f"{where}: its launch line does not explain ({type(error).__name__}: {str(error)[:80]})"]
    found = []
    for key in SAME:
        if key in candidate and candidate[key] is not None and not _same(candidate[key], explained.get(key)):
            found.append(f"{where}: {key} {candidate[key]} but its line explains {explained.get(key)}")
    per_gpu = candidate.get("vram_per_gpu_mib")  # llama.cpp: MiB per device, explain's vram_<device>_gib
    own = next((value for value in explained.values() if isinstance(value, dict) and "layers_on_gpu" in value), {})
    for device, mib in (per_gpu.items() if isinstance(per_gpu, dict) else ()):
        gib = own.get(f"vram_{str(device).lower()}_gib", 0.0 if mib == 0 else None)  # a device given nothing
        if gib is None or abs(gib * 1024 - mib) > 1.5:
            found.append(f"{where}: {device} {mib} MiB but its line explains {gib} GiB")
    return found


def _same(a, b) -> bool:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return a == b
    return abs(a - b) <= max(1e-3 * max(abs(a), abs(b)), 0.002)  # the candidate's figures are rounded


# --- compare -----------------------------------------------------------------------------------------------------

def random_compare(rng: random.Random, models: list[str], gpus: list[str]) -> dict:
    from vram_detective.engines import ENGINES, get_engine

    engines = tuple(rng.sample(sorted(ENGINES), rng.randint(1, len(ENGINES))))
    versions = {}
    for name in engines:
        if rng.randrange(3) == 0:
            known = list(get_engine(name).releases.known)
            versions[name] = rng.choice(known + (["9.9", "0.0.1", "x"] if rng.randrange(10) == 0 else []))
    return {"model": rng.choice(models), "gpu": rng.choice(gpus),
            "context": rng.choice([None, None, 4096, 32768, 131072, 1, 0, -5, 1 << 40]),
            "tp": rng.choice([1, 1, 1, 2, 4, 8, 0, -1, 3]), "engines": engines, "versions": versions,
            "gguf_type": rng.choice([None, None, "Q4_K_M", "Q8_0", "Q5_K_M", "Q9", ""]),
            "speculation": rng.choice([None, None, None, {"method": rng.choice(["mtp", "eagle", "eagle3", "ngram"]),
                                                          "tokens": rng.choice([1, 3, 5, 64])},
                                       {"method": "draft_model", "draft_model": rng.choice(models), "tokens": 4}])}


def run_compare(call: dict):
    from vram_detective import library

    return library.compare(call["model"], call["gpu"], **{k: v for k, v in call.items() if k not in ("model", "gpu")})


def compare_problems(call: dict, answer: dict) -> list[str]:
    """Each column is what explain answers for that engine, with the settings compare gives it."""
    from vram_detective import api
    from vram_detective.compare import DEFAULT_GGUF_TYPE
    from vram_detective.engines import get_engine
    from vram_detective.engines.base import Speculation, common_settings
    from vram_detective.render import to_json

    found = []
    for column in answer.get("engines") or []:
        name = column.get("engine_name")
        engine = get_engine(name)
        values = common_settings(engine, context=call["context"], gpus=call["tp"])
        if engine.gguf_mixes:
            values.setdefault("gguf_type", call["gguf_type"] or DEFAULT_GGUF_TYPE)
        if call.get("speculation"):
            values.update(engine.speculative_settings(Speculation(**call["speculation"])))
        expected = to_json(api.explain(call["model"], call["gpu"], engine=name,
                                       engine_version=call["versions"].get(name), **values))
        if _figures(expected) != _figures(column):
            diff = [k for k in _figures(expected) if _figures(expected)[k] != _figures(column).get(k)]
            found.append(f"{name} column differs from explain in {diff[:4]}")
        found += [f"{name}: negative {item}" for item in negatives(column)] if not column.get("startup_failed") else []
    return found


def _figures(column: dict) -> dict:
    keys = ("engine_version", "weights_gib", "kv_cache_gib", "kv_cache_tokens", "max_concurrency", "max_model_len",
            "nvidia_smi_used_mib", "startup_failed", "kv_bytes_per_token")
    return {key: column.get(key) for key in keys}


# --- logs --------------------------------------------------------------------------------------------------------

def real_logs() -> list[str]:
    """Every `log` field of the ground-truth files (what the engines and nvidia-smi printed)."""
    found = []
    for path in sorted(glob.glob(str(ROOT / "groundtruth" / "*.jsonl"))):
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if line.strip():
                log = json.loads(line).get("log")
                if log:
                    found.append(log)
    return found


NUMBER = re.compile(r"\d+(\.\d+)?")
HUGE = ["9" * 400, "1e308", "18446744073709551616", "-0", "nan", "inf", "0", "-12", "0.000001", "1" + "0" * 40]


def mutate_log(rng: random.Random, logs: list[str]) -> str:
    """A real log with one to four mutations."""
    text = rng.choice(logs)
    for _ in range(rng.randint(1, 4)):
        text = rng.choice(MUTATIONS)(rng, text, logs)
    return text


def _drop(rng, text, logs):
    lines = text.splitlines()
    return "\n".join(line for line in lines if rng.randrange(4))


def _repeat(rng, text, logs):
    lines = text.splitlines() or [""]
    index = rng.randrange(len(lines))
    return "\n".join(lines[:index] + [lines[index]] * rng.choice([2, 3, 50]) + lines[index + 1:])


def _truncate(rng, text, logs):
    return text[:rng.randrange(len(text) + 1)]


def _numbers(rng, text, logs):
    return NUMBER.sub(lambda m: rng.choice(HUGE) if rng.randrange(3) == 0 else m.group(0), text)


def _noise(rng, text, logs):
    chars = list(text)
    for _ in range(rng.randint(1, 20)):
        chars.insert(rng.randrange(len(chars) + 1), chr(rng.choice([0, 7, 9, 27, 0xfffd, 0x202e, rng.randrange(32, 0x3000)])))
    return "".join(chars)


def _mix(rng, text, logs):
    other = rng.choice(logs).splitlines()
    lines = text.splitlines()
    for line in other[: rng.randint(1, max(1, len(other)))]:
        lines.insert(rng.randrange(len(lines) + 1), line)
    return "\n".join(lines)


def _line_ends(rng, text, logs):
    return text.replace("\n", rng.choice(["\r\n", "\r", "\n\r", "\r\r\n"]))


def _long_line(rng, text, logs):
    lines = text.splitlines() or [""]
    index = rng.randrange(len(lines))
    lines[index] = lines[index] * rng.choice([2, 20, 200])
    return "\n".join(lines)


def _empty(rng, text, logs):
    return rng.choice(["", "\n", " ", "\x00" * 10, "\ufeff" + text])


MUTATIONS = [_drop, _repeat, _truncate, _numbers, _noise, _mix, _line_ends, _long_line, _drop, _numbers, _mix, _empty]


def nvidia_smi_text(rng: random.Random) -> str:
    """nvidia-smi's table or CSV output for one to two GPUs, with hostile figures now and then."""
    def mib() -> str:
        return rng.choice(["10240", "24564", "81559", "3", "0"]) if rng.randrange(8) else rng.choice(HUGE)

    name = rng.choice(["NVIDIA GeForce RTX 4090", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA L40S", "X"])
    if rng.randrange(2):
        head = "index, name, memory.used [MiB], memory.total [MiB]"
        return "\n".join([head] + [f"{i}, {name}, {mib()} MiB, {mib()} MiB" for i in range(rng.randint(1, 2))]) + "\n"
    rows = []
    for index in range(rng.randint(1, 2)):
        rows.append(f"|   {index}  {name:<26} Off |   00000000:0{index + 1}:00.0 Off |                  Off |")
        rows.append(f"|  0%   38C    P8             21W /  450W |   {mib()}MiB /  {mib()}MiB |      0%      Default |")
    return "\n".join(["+" + "-" * 89 + "+", "| NVIDIA-SMI 550.120                Driver Version: 550.120        "
                      "CUDA Version: 12.4     |", "|" + "=" * 89 + "|", *rows, "+" + "-" * 89 + "+"]) + "\n"


def random_logs(rng: random.Random, logs: list[str]) -> dict:
    call = {"text": mutate_log(rng, logs)}
    if rng.randrange(4) == 0:
        call["nvidia_smi"] = nvidia_smi_text(rng) if rng.randrange(5) else mutate_log(rng, logs)
    if rng.randrange(6) == 0:
        call["gpu"] = rng.choice(["RTX 4090", "H100", "nope", "A100"])
    return call


def run_logs(call: dict):
    from vram_detective import library

    return library.logs(call["text"], nvidia_smi=call.get("nvidia_smi"), gpu=call.get("gpu"))


# a logs report echoes the figures the log printed as printed (vLLM logs a negative "Available KV cache memory"
# before it refuses, a graph capture that "took -0.03 GiB"): the observed figures, per rank, in bytes
# (breakdown_fields) and the memory bar of the printed parts; only the tool's own figures are checked
ECHOED = ("observed", "per_rank", "other_figures", "breakdown_fields", "bar")


def logs_problems(answer: dict) -> list[str]:
    return [f"negative {item}" for item in negatives(_without_echoes(answer))]


def _without_echoes(value):
    if isinstance(value, dict):
        if value.get("basis") == "logged":  # a part of the nvidia-smi breakdown that is the logged figure
            return {}
        return {key: _without_echoes(item) for key, item in value.items() if key not in ECHOED}
    if isinstance(value, list):
        return [_without_echoes(item) for item in value]
    return value


# --- score -------------------------------------------------------------------------------------------------------

def real_cases() -> list[str]:
    lines = []
    for path in ("dev.jsonl", "dev-sglang.jsonl", "dev-llamacpp.jsonl", "dev-vllm-more.jsonl"):
        lines += [line for line in (ROOT / "groundtruth" / path).read_text(encoding="utf-8").splitlines() if line]
    return lines


CASE_VALUES = [None, -1, 0, 1e308, float("nan"), "x", [], {}, [1, 2], True, "9" * 50, {"a": {"b": 1}}, -1e12]


def mutate_case(rng: random.Random, line: str) -> str:
    """A ground-truth line with a field removed or given a wrong value, or the line cut or garbled."""
    case = json.loads(line)
    choice = rng.randrange(6)
    if choice == 0 and case:
        case.pop(rng.choice(sorted(case)))
    elif choice == 1:
        case[rng.choice(sorted(case) + ["engine", "settings", "observed", "num_gpus"])] = rng.choice(CASE_VALUES)
    elif choice == 2 and isinstance(case.get("settings"), dict) and case["settings"]:
        case["settings"][rng.choice(sorted(case["settings"]))] = rng.choice(CASE_VALUES)
    elif choice == 3 and isinstance(case.get("observed"), dict) and case["observed"]:
        case["observed"][rng.choice(sorted(case["observed"]))] = rng.choice(CASE_VALUES)
    elif choice == 4:
        return line[: rng.randrange(len(line))]
    else:
        case["engine"] = rng.choice(["vllm", "sglang", "llamacpp", "ollama", "llama.cpp", "VLLM", "bogus", 7])
    text = json.dumps(case)
    return text if rng.randrange(20) else text.replace(",", rng.choice(["\x00,", ",,", "\r,"]), 1)


def random_score(rng: random.Random, lines: list[str]) -> dict:
    picked = [mutate_case(rng, rng.choice(lines)) if rng.randrange(3) else rng.choice(lines)
              for _ in range(rng.randint(1, 3))]
    return {"text": "\n".join(picked), "from_logs": rng.randrange(3) == 0}


def run_score(call: dict):
    from vram_detective.scoring import read_case_text, score_cases

    cases, unreadable = read_case_text(call["text"])
    return score_cases(cases, from_logs=call["from_logs"], catalog_only=True, unreadable=unreadable)
