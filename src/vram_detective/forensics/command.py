"""`vram-detective logs LOG [--nvidia-smi FILE] [--model M] [--gpu G] [--json]`.

register() only declares arguments (argparse): the CLI imports this module for every command, so the
parser, the catalog and the predictor are imported inside run().
"""
from __future__ import annotations

import argparse
import contextlib
import io

EXAMPLES = """examples:
  vram-detective logs vllm.log
  vllm serve Qwen/Qwen3-8B 2>&1 | tee vllm.log | vram-detective logs -
  vram-detective logs vllm.log --nvidia-smi smi.txt      # the default table, --query-gpu CSV, or -q -x XML
  vram-detective logs vllm.log --model Qwen/Qwen2.5-7B-Instruct-AWQ --gpu "RTX 4090" --json
  vram-detective logs --nvidia-smi smi.txt --model Qwen/Qwen3-8B     # no log: the utilization from the reading
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "logs", help="read a real vLLM, SGLang, llama.cpp or Ollama log (and nvidia-smi): who took the memory, and why",
        description="Parse an engine's startup log (vLLM of any release from 0.2 on; SGLang, llama.cpp and Ollama through "
                    "their own parsers): the figures each rank printed, the "
                    "settings and release it implies, the catalog models consistent with it, observed vs predicted "
                    "with the likely cause of each gap, what nvidia-smi's number is made of, which flags would "
                    "shrink the footprint, and, when the log goes on while serving, how much of the KV pool the "
                    "traffic used (the periodic 'KV cache usage' / 'token usage' lines).",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("log", nargs="?", help="the engine's log file, or - to read standard input (optional with "
                                                "--nvidia-smi and --model)")
    parser.add_argument("--nvidia-smi", dest="nvidia_smi", metavar="FILE",
                        help="nvidia-smi output taken after startup: the default table, "
                             "--query-gpu=index,name,memory.used,memory.total --format=csv, or -q -x XML")
    parser.add_argument("--model", dest="logs_model", metavar="MODEL",
                        help="the model that ran, when the log does not name it (catalog repo id or local directory)")
    parser.add_argument("--gpu", dest="logs_gpu", metavar="GPU", help='the GPU it ran on ("RTX 4090", "H100", ...)')
    parser.add_argument("-tp", "--tensor-parallel-size", dest="logs_tp", type=int, metavar="N",
                        help="GPUs the model was split over, for nvidia-smi output read without a log")
    parser.add_argument("--engine-version", "--vllm-version", dest="logs_vllm_version", metavar="VERSION",
                        help="the engine's release, when the log does not show it (--vllm-version: the old name)")
    parser.add_argument("--ollama-ps", dest="ollama_ps", metavar="FILE",
                        help="`ollama ps` output taken while the model ran (SIZE, PROCESSOR), read with an Ollama log")
    parser.add_argument("--json", action="store_true", help="machine-readable output (the ground truth's key names)")
    parser.add_argument("--markdown", action="store_true", help="the report as a Markdown document")
    parser.add_argument("--wide", action="store_true", help="full lines instead of fitting the terminal")
    parser.add_argument("--verbose", action="store_true", help="also show the rule names behind each figure")
    parser.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report (inline SVG and CSS)")


def run(args) -> int:
    import sys

    try:
        if args.log is None:
            report = reading_only(getattr(args, "nvidia_smi", None), getattr(args, "logs_model", None),
                                  getattr(args, "logs_gpu", None), getattr(args, "logs_vllm_version", None),
                                  getattr(args, "logs_tp", None))
        else:
            report = build_report(args.log, nvidia_smi=getattr(args, "nvidia_smi", None),
                              model=getattr(args, "logs_model", None), gpu=getattr(args, "logs_gpu", None),
                              vllm_version=getattr(args, "logs_vllm_version", None),
                                  ollama_ps=getattr(args, "ollama_ps", None))
    except KeyboardInterrupt:
        print("vram-detective: error: interrupted", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 - the contract is one line on stderr, never a traceback
        from ..errors import BAD_INPUT, kind, report

        if kind(error) != BAD_INPUT:
            return report(error)  # a refusal (exit 1) or a bug in the tool (exit 3)
        print(f"vram-detective: error: {_one_line(error)}", file=sys.stderr)
        return 2
    if getattr(args, "html", None) and report.get("log") is not None:
        from ..web.report import logs_html_report

        try:
            with open(args.html, "w", encoding="utf-8") as handle:
                handle.write(logs_html_report(report))
        except OSError as error:
            print(f"vram-detective: error: cannot write {args.html}: {error.strerror or error}", file=sys.stderr)
            return 2
        print(f"wrote {args.html}", file=sys.stderr)
    try:
        if args.json:
            import json

            from ..library import envelope

            print(json.dumps(envelope("logs", report.get("engine"), report), indent=2, default=str))
        else:
            from ..term import args_width

            text = render_text(report, None if getattr(args, "markdown", False) else args_width(args),
                               verbose=getattr(args, "verbose", False))
            print(f"```\n{text}\n```" if getattr(args, "markdown", False) else text)
    except BrokenPipeError:
        return 0
    return 0


def _one_line(error: BaseException) -> str:
    text = str(error).strip()
    if isinstance(error, KeyError):
        text = f"missing {text}"
    if isinstance(error, FileNotFoundError):
        text = f"no such file: {error.filename}"
    elif isinstance(error, IsADirectoryError):
        text = f"is a directory: {error.filename}"
    elif isinstance(error, PermissionError):
        text = f"cannot read {error.filename}: permission denied"
    text = text.splitlines()[0] if text else type(error).__name__
    known = ("LogInputError", "SmiInputError", "UnknownGpuError", "UnknownModelError", "FileNotFoundError",
             "IsADirectoryError", "PermissionError", "ValueError", "UnsupportedReleaseError")
    if type(error).__name__ not in known and not isinstance(error, (ValueError, LookupError, OSError)):
        text = f"could not analyse the log ({type(error).__name__}: {text})"
    return text


# --- the analysis ---------------------------------------------------------------------------------------------

def reading_only(nvidia_smi: str | None, model: str | None, gpu: str | None, version: str | None,
                 tp: int | None) -> dict:
    """nvidia-smi output and a model, no engine log: the utilization that explains the reading (reading.py)."""
    import sys

    from .nvidia_smi import parse_file, parse_nvidia_smi
    from .reading import reading_report

    if not nvidia_smi:
        raise ValueError("give an engine log, or --nvidia-smi FILE with --model MODEL")
    if not model:
        raise ValueError("nvidia-smi output without a log needs --model (the model that ran)")
    if tp is not None and tp < 1:
        raise ValueError(f"--tensor-parallel-size must be 1 or more, not {tp}")
    smi = parse_nvidia_smi(sys.stdin.read()) if nvidia_smi == "-" else parse_file(nvidia_smi)
    return reading_report(smi, model, gpu, version, tp)


def build_report(log: str, nvidia_smi: str | None = None, model: str | None = None, gpu: str | None = None,
                 vllm_version: str | None = None, stdin=None, ollama_ps: str | None = None) -> dict:
    from .engine_logs import detect_engine
    from .streaming import HEAD_BYTES, parse_stream_bounded

    _check_inputs(log, nvidia_smi, model, gpu, vllm_version)
    extra = _read_text(ollama_ps) if ollama_ps else None
    smi = _read_nvidia_smi(nvidia_smi)
    name = "standard input" if log == "-" else log
    with _log_stream(log, stdin) as stream:
        head = _head(stream, 1 << 20)
        if log != "-" and nvidia_smi is None and _is_nvidia_smi(head):
            raise ValueError(f"{log} is nvidia-smi output, not an engine log: pass it with --nvidia-smi "
                             f"(vram-detective logs ENGINE_LOG --nvidia-smi {log})")
        # only the head names the engine; a vLLM log is then streamed with bounded memory (streaming.py), another
        # engine's log read as its first and last parts (bounded_text)
        if extra is not None or detect_engine(_head(stream, HEAD_BYTES)) != "vllm":
            engine = _other_engine(bounded_text(stream), log, model, gpu, vllm_version, smi, extra)
            if engine is not None:
                return engine
        bounded = parse_stream_bounded(stream, name, keep=LISTED_RUNS)
    return _vllm_report(log, bounded, head, model, gpu, vllm_version, smi)


def _check_inputs(log: str, nvidia_smi: str | None, model: str | None, gpu: str | None,
                  vllm_version: str | None) -> None:
    """Bad input (both from standard input, an unknown GPU, release or model) is refused before any work."""
    if log == "-" and nvidia_smi == "-":
        raise ValueError("the log and --nvidia-smi cannot both be read from standard input")
    if gpu:
        from ..hardware import find_gpu

        find_gpu(gpu)  # an unknown name is bad input before any work
    if vllm_version:
        from ..engines import get_engine

        get_engine("vllm").releases.resolve(vllm_version)
    if model and not _named_by_an_engine(model):
        from .. import api

        api.model_spec(model)  # an unknown or unsupported model is bad input too


def _read_nvidia_smi(nvidia_smi: str | None):
    """The nvidia-smi reading from a file or standard input ("-"); None without one."""
    import sys

    from .nvidia_smi import parse_file as parse_smi_file
    from .nvidia_smi import parse_nvidia_smi

    if nvidia_smi == "-":
        return parse_nvidia_smi(sys.stdin.read())
    if nvidia_smi:
        return parse_smi_file(nvidia_smi)
    return None


def _vllm_report(log: str, bounded, head: str, model: str | None, gpu: str | None, vllm_version: str | None,
                 smi) -> dict:
    """The report of a parsed vLLM log: the last runs analyzed in full (the very last with nvidia-smi), earlier
    ones summarized, and a count of the startups before those kept."""
    parsed, earlier = bounded.parsed, bounded.earlier
    last = len(parsed.runs) - 1
    from .infer import model_named_in

    named = None if model else model_named_in(head)
    runs = [analyze_run(run, parsed, model=model, gpu=gpu, vllm_version=vllm_version,
                        smi=smi if index == last else None, named=named) if index > last - DEEP_RUNS else summarize_run(run)
            for index, run in enumerate(parsed.runs)]
    return {
        "log": "standard input" if log == "-" else log,
        "lines_read": parsed.lines_read,
        "lines_with_figures": parsed.lines_matched,
        "bytes_read": parsed.bytes_read,
        "lines_cut": parsed.truncated_lines,
        "nvidia_smi": smi.to_dict() if smi is not None else None,
        "runs": runs,
    } | ({"earlier_runs": earlier.to_dict()} if earlier.count else {})  # startups before the ones kept in full


def _is_nvidia_smi(text: str) -> bool:
    """nvidia-smi's own output (its table, CSV query or XML) with no engine line in it."""
    head = text[:8192]
    looks = ("NVIDIA-SMI" in head and "Memory-Usage" in head) or "<nvidia_smi_log" in head or (
        head.lstrip().lower().startswith(("index,", "name,", "memory.used")))
    return looks and not any(word in text for word in ("INFO ", "WARNING ", "Loading model weights", "llama_",
                                                       "load_tensors", "GPU blocks", "KV Cache"))


def _read_head(path: str, limit: int = 1 << 20) -> str:
    """The start of a file: enough to tell nvidia-smi output from an engine log."""
    from ..units import open_regular_file

    with open_regular_file(path, "log") as handle:
        return handle.read(limit).decode("utf-8", "replace")


# A log from standard input is copied to a spooled file (memory up to SPOOL_BYTES, then a temporary file) so
# that it is read like a file, with the same memory bound: streamed for vLLM, first and last parts for the others
SPOOL_BYTES = 8 << 20
# another engine's log is read whole up to TEXT_BYTES; a longer one as its first TEXT_HEAD_BYTES and the rest
# of TEXT_BYTES from its end (the startup that matters is the last; every engine prints its banner first)
TEXT_BYTES = 4 << 20
TEXT_HEAD_BYTES = 1 << 20


@contextlib.contextmanager
def _log_stream(log: str, stdin=None):
    """A seekable binary stream of the log: the file itself, or standard input spooled (binary input refused
    from its first bytes, before anything else is read)."""
    from ..units import open_regular_file

    if log != "-":
        with open_regular_file(log, "log") as stream:
            yield stream
        return
    import sys
    import tempfile

    from ..textlog import SNIFF_BYTES, LogInputError, _looks_binary

    source = stdin if stdin is not None else sys.stdin
    source = source.buffer if hasattr(source, "buffer") else source
    if hasattr(source, "seekable") and source.seekable() and isinstance(source, io.BytesIO):
        yield source
        return
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
        first = True
        while True:
            chunk = source.read(1 << 20)
            if isinstance(chunk, str):
                chunk = chunk.encode("utf-8")
            if not chunk:
                break
            if first and _looks_binary(chunk[:SNIFF_BYTES]):
                raise LogInputError("standard input is not a text log (binary data)")
            first = False
            spool.write(chunk)
        spool.seek(0)
        yield spool


def _head(stream, limit: int) -> str:
    stream.seek(0)
    head = stream.read(limit)
    stream.seek(0)
    return head.decode("utf-8", "replace")


def bounded_text(stream) -> str:
    """The log as text for the engines read whole (llama.cpp, SGLang, Ollama): all of it up to TEXT_BYTES, else
    its first TEXT_HEAD_BYTES and its last bytes, cut at line breaks (memory bounded whatever the log's size)."""
    stream.seek(0, 2)
    size = stream.tell()
    stream.seek(0)
    if size <= TEXT_BYTES:
        data = stream.read()
    else:
        head = stream.read(TEXT_HEAD_BYTES)
        stream.seek(size - (TEXT_BYTES - TEXT_HEAD_BYTES))
        tail = stream.read()
        data = head[:head.rfind(b"\n") + 1] + tail[tail.find(b"\n") + 1:]
    stream.seek(0)
    return data.decode("utf-8", "replace")


def _read_text(path: str) -> str:
    with open(path, "rb") as handle:
        return handle.read().decode("utf-8", "replace")


def _other_engine(text: str, log: str, model, gpu, version, smi, extra: str | None = None) -> dict | None:
    """The report of an engine other than vLLM when that engine wrote the log (engine_logs.py), else None.
    `extra`: `ollama ps` output, which only goes with an Ollama log."""
    from .engine_logs import build_engine_report, detect_engine

    name = detect_engine(text)
    if extra is not None and name != "ollama":
        raise ValueError("--ollama-ps goes with an Ollama server log (this log is not Ollama's)")
    if name == "vllm":
        return None
    return build_engine_report(text, name, log="standard input" if log == "-" else log, model=model, gpu=gpu,
                               version=version, smi=smi, extra=extra)


def _named_by_an_engine(model: str) -> bool:
    """Is `model` a name only an engine knows (a model in Ollama's local store)?"""
    from ..engines import ENGINES, get_engine
    from ..engines.base import resolve_model

    return any(resolve_model(get_engine(name), model) is not None for name in ENGINES)


DEEP_RUNS = 8  # runs analysed in full (the last ones); earlier restarts are listed with their figures
LISTED_RUNS = 64  # runs listed at all; the startups before them are folded into one summary (bounded memory)


def summarize_run(run) -> dict:
    observed = run.observed()
    return {"run": run.index + 1, "lines": [run.first_line, run.last_line], "observed": observed,
            "per_rank": run.per_rank(), "other_figures": run.extras(),
            "startup": {"failed": observed.get("startup_failed"), "message": run.failure_message(),
                        "success_markers": [text for _, text in run.successes][:3]},
            "summary_only": True, "serving": _serving(run, observed)}


def _serving(run, observed: dict) -> dict | None:
    """The periodic stats lines after this start (forensics/serving.py), sized by the pool it printed."""
    if run.serving is None:
        return None
    return run.serving.to_dict(pool_gib=observed.get("kv_cache_gib"), pool_blocks=observed.get("num_gpu_blocks"))


def analyze_run(run, parsed, *, model=None, gpu=None, vllm_version=None, smi=None, search: bool = True,
                named: tuple[str, str] | None = None) -> dict:
    from .infer import infer_run
    from .nvidia_smi import reading_from_log_items
    from .observed import FIELDS, build_observed
    from .reconcile import anomalies, explain_nvidia_smi, reconcile

    observed = _observed_with_smi(run, smi)
    extras = run.extras()
    smi_reading = smi or reading_from_log_items(run.smi_gpus, run.smi_processes)
    inference = infer_run(run, observed, log_markers=parsed.markers, model=model, gpu=gpu, vllm_version=vllm_version,
                          smi=smi, search_candidates=search, named=named)
    chosen_model, model_basis, source, candidate_tp = _choose_model(observed, inference)
    reconciliation = None
    prediction = None
    if chosen_model and not any("older than the oldest" in note for note in inference.notes):
        reconciliation = reconcile(observed, inference, chosen_model, source, run, candidate_tp)
        prediction = reconciliation.prediction
    _default_settings(observed, inference, prediction)
    smi_explanation = explain_nvidia_smi(observed, inference, prediction, smi_reading, run)
    flags = anomalies(observed, extras, inference, prediction, smi_explanation, smi_reading, run)
    shrink = _shrink(observed, inference, prediction, reconciliation, chosen_model, source)
    from .answer import answer_figures

    kv_pool = _kv_pool(observed, prediction, chosen_model)
    build = build_observed(observed, model=chosen_model, gpu_name=inference.gpu.value.name if inference.gpu else None,
                           vllm_version=inference.version.value if inference.version else None,
                           engine=inference.engine.value if inference.engine else None,
                           settings=inference.setting_values(), per_rank=run.per_rank(),
                           failure_message=run.failure_message())
    return {
        "run": run.index + 1,
        "lines": [run.first_line, run.last_line],
        "observed": observed,
        "per_rank": run.per_rank(),
        "other_figures": extras,
        "startup": {"failed": observed.get("startup_failed"), "message": run.failure_message(),
                    "success_markers": [text for _, text in run.successes][:3]},
        "vllm_version": inference.version.to_dict() if inference.version else None,
        "engine": inference.engine.to_dict() if inference.engine else None,
        "gpu": inference.gpu.to_dict() if inference.gpu else None,
        "model": inference.model.to_dict() if inference.model else None,
        "model_used_for_prediction": {"model": chosen_model, "why": model_basis} if chosen_model else None,
        "settings": {name: item.value for name, item in inference.settings.items()},
        "settings_basis": {name: {"basis": item.basis, "confidence": item.confidence}
                           for name, item in inference.settings.items()},
        "candidates": [candidate.to_dict() for candidate in inference.candidates],
        "candidates_searched": inference.candidates_searched,
        "kv_pool": kv_pool,
        "serving": _serving(run, observed),
        "answer": answer_figures(observed, prediction, kv_pool, inference.gpu is not None),
        "reconciliation": reconciliation.to_dict() if reconciliation else None,
        "nvidia_smi_breakdown": smi_explanation.to_dict() if smi_explanation else None,
        "anomalies": flags,
        "what_if": shrink,
        "log_notes": [text for _, text in run.notes],
        "notes": inference.notes,
        "breakdown_fields": dict({name: getattr(build, name) for name, _, _ in FIELDS},
                                 kv_bytes_per_token=build.kv_bytes_per_token),
    }


def _observed_with_smi(run, smi) -> dict:
    """The run's figures, with nvidia-smi's used / total for GPU 0 when a reading was given."""
    observed = run.observed()
    if smi is not None and smi.gpus:
        first = smi.gpu(0)
        if first.used_mib is not None:
            observed["nvidia_smi_used_mib"] = first.used_mib
        if first.total_mib is not None:
            observed["nvidia_smi_total_mib"] = first.total_mib
        observed = {key: observed[key] for key in _ordered(observed)}
    return observed


def _choose_model(observed: dict, inference) -> tuple:
    """(model to predict with, why, its source, TP of the best candidate): the named model, else the best
    catalog candidate (whose TP and precision become inferred settings / notes)."""
    chosen_model, model_basis, source, candidate_tp = None, None, "catalog", None
    if inference.model is not None:
        chosen_model = inference.model.value
        model_basis = "named"
        source = None if inference.model.confidence == "given" else "catalog"
        if inference.model.basis.endswith("not in the catalog"):
            chosen_model = None
    elif inference.candidates:
        best = inference.candidates[0]
        chosen_model, model_basis, candidate_tp = best.model, "best candidate", best.tensor_parallel_size
        if "tensor_parallel_size" not in inference.settings:
            from .infer import Inferred

            inference.settings["tensor_parallel_size"] = Inferred(
                candidate_tp, f"the per-GPU weights of {best.model} match at tensor_parallel_size {candidate_tp}", "low")
        inference.notes.append(f"{best.model} stores {best.precision}")
    if chosen_model and model_basis == "named" and "quantization" not in inference.settings:
        from .infer import infer_quantization

        quantization = infer_quantization(observed, inference, chosen_model, source)
        if quantization is not None and quantization.confidence == "medium":
            inference.settings["quantization"] = quantization
        elif quantization is not None:
            inference.notes.append(f"quantization: {quantization.basis}")
    return chosen_model, model_basis, source, candidate_tp


def _default_settings(observed: dict, inference, prediction) -> None:
    """gpu_memory_utilization and max_model_len the log does not state: inferred, else the release's defaults."""
    from .infer import Inferred, infer_utilization

    if "gpu_memory_utilization" not in inference.settings:
        util = infer_utilization(observed, prediction, inference)
        if util is not None:
            inference.settings["gpu_memory_utilization"] = util
        elif prediction is not None:
            inference.settings["gpu_memory_utilization"] = Inferred(
                prediction.setting("gpu_memory_utilization"), f"vLLM {prediction.vllm_version}'s default", "default")
    if "max_model_len" not in inference.settings and prediction is not None:
        inference.settings["max_model_len"] = Inferred(prediction.max_model_len, "the model's own context length "
                                                       "(vLLM's default)", "default")


def _shrink(observed: dict, inference, prediction, reconciliation, chosen_model, source) -> dict:
    """The flags that would shrink the footprint; an nvidia-smi gap at a guessed utilization says so."""
    from .infer import STRONG
    from .reconcile import what_ifs

    if prediction is None or inference.gpu is None:
        return {}
    settings = dict(reconciliation.settings)
    util = inference.settings.get("gpu_memory_utilization")
    current_u = float(util.value) if util is not None else None
    if observed.get("startup_failed"):
        return _start_fixes(inference, prediction, settings, current_u, chosen_model, source)
    shrink = what_ifs(chosen_model, inference.gpu.value, prediction.vllm_version,  # the comparison's release
                      settings, current_u, source, observed.get("nvidia_smi_used_mib"))
    if shrink and util is not None and util.confidence not in STRONG:
        for row in reconciliation.rows:
            if row.key == "nvidia_smi_used_mib" and not row.agrees:
                at_u = shrink["baseline"]["predicted_nvidia_smi_mib"]
                row.cause = (f"predicted at the default gpu_memory_utilization "
                             f"{prediction.setting('gpu_memory_utilization'):g}; at the inferred {util.value:g} the "
                             f"prediction is {at_u:,} MiB ({(at_u - row.observed) / row.observed:+.1%}); "
                             "see the nvidia-smi breakdown")
    return shrink


def _start_fixes(inference, prediction, settings: dict, current_u, chosen_model, source) -> dict:
    """A failed start: the flags that make it start, each checked with the prediction (reconcile.start_fixes)."""
    from .reconcile import start_fixes

    if current_u is not None:
        settings = dict(settings, gpu_memory_utilization=current_u)
    if prediction.failure is None:
        return {"start_fixes": [], "predicted_to_start": True}
    fixes = start_fixes(chosen_model, inference.gpu.value, prediction.vllm_version, settings, source)
    gpu = inference.gpu.value.name
    return {"start_fixes": fixes, "predicted_to_start": False,
            "fit_hint": f'vram-detective fit {chosen_model} --gpu "{gpu}"'}


def _kv_pool(observed: dict, prediction, chosen_model) -> dict | None:
    if observed.get("num_gpu_blocks") is None or prediction is None or not prediction.kv_bytes_per_token:
        return None
    block_bytes = prediction.kv_bytes_per_token * prediction.block_size
    return {"num_gpu_blocks": observed["num_gpu_blocks"], "bytes_per_block": block_bytes,
            "block_size": prediction.block_size, "gib": round(observed["num_gpu_blocks"] * block_bytes / 2**30, 3),
            "model": chosen_model}


def _ordered(observed: dict) -> list[str]:
    from ..engines import get_engine

    return [key for key in get_engine("vllm").logs.reader().OBSERVED_KEYS if key in observed]


# --- text ------------------------------------------------------------------------------------------------------

def _value(key: str, value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key.endswith("_gib"):
        return f"{value:g} GiB"
    if key.endswith("_mib"):
        return f"{value:,} MiB"
    if key == "max_concurrency":
        return f"{value:g}x"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


_COLUMNS: list = [None]  # the width render_text fits (set per call; the part renderers read it)


def _table(rows: list[tuple], indent: str = "    ") -> list[str]:
    from ..term import columns_text

    if not rows:
        return []
    return columns_text(rows, "l" * len(rows[0]), _COLUMNS[0], indent=indent)


def render_text(report: dict, columns: int | None = -1, verbose: bool = False) -> str:
    """The report as text fitting `columns` (-1: the terminal's; None: full lines); a line that is not a
    table wraps with its continuation indented."""
    from ..render import public
    from ..term import paragraph, width

    columns = width() if columns == -1 else columns
    if report.get("log") is None and "parts" in report:
        from .reading import render_reading

        return "\n".join(paragraph([public(line, verbose) if line.strip() else line
                                    for line in render_reading(report, columns)], columns, "    "))
    if report.get("engine") not in (None, "vllm"):
        from .engine_logs import render_engine_report

        return "\n".join(paragraph(render_engine_report(report).splitlines(), columns, "    "))
    _COLUMNS[0] = columns
    lines = [f"vLLM log: {report['log']} ({report['lines_read']:,} lines, {report['lines_with_figures']:,} with vLLM "
             f"figures, {len(report['runs'])} run{'s' if len(report['runs']) != 1 else ''})"]
    if report.get("lines_cut"):
        lines.append(f"  ({report['lines_cut']} over-long lines were cut at 64 KiB)")
    earlier = report.get("earlier_runs")
    if earlier:
        lines.append(f"  {earlier['runs']:,} earlier startups (lines {earlier['lines'][0]:,}-{earlier['lines'][1]:,}) "
                     f"summarized: {earlier['started']:,} started, {earlier['failed']:,} failed; the last "
                     f"{LISTED_RUNS} are listed (--json: earlier_runs)")
    for run in report["runs"]:
        lines.append("")
        lines += _render_run(run, verbose)
    return "\n".join(paragraph([public(line, verbose) if line.strip() else line for line in lines], columns, "    "))


def _render_run(run: dict, verbose: bool = False) -> list[str]:
    from .answer import render_answer
    from .observed import LABELS

    failed = run["startup"]["failed"]
    outcome = ("FAILED: " + _first_sentence(run["startup"]["message"] or "") if failed else
               "started" if failed is False else "outcome not in the log")
    lines = [f"Run {run['run']} (lines {run['lines'][0]}-{run['lines'][1]}): {outcome}"]
    if run.get("summary_only"):
        text = ", ".join(f"{LABELS.get(k, k)} {_value(k, v)}" for k, v in run["observed"].items())
        lines.append(f"  {text} (an earlier start: the last {DEEP_RUNS} runs are analysed in full)")
        if run.get("serving"):
            from .serving import serving_line

            lines.append("  " + serving_line(run["serving"]))
        return lines
    lines += render_answer(run, _COLUMNS[0])
    if run.get("serving"):
        from .serving import serving_line

        lines.append("  " + serving_line(run["serving"]))
    details = (_render_identity,) if verbose else ()
    for part in details + (_render_observed, _render_settings, _render_candidates, _render_reconciliation,
                           _render_smi, _render_what_if):
        lines += part(run)
    for note in run["log_notes"][:6] + run["notes"]:
        lines.append(f"  note: {note}")
    return lines


def _first_sentence(text: str, limit: int = 240) -> str:
    """A message's first sentence, cut at a word (never mid-word) when longer than `limit`."""
    head = text.split(". ")[0].strip()
    head = head if len(head) <= limit else head[:limit].rsplit(" ", 1)[0] + " ..."
    return head if head.endswith((".", "...")) or not head else head + "."


def _render_identity(run: dict) -> list[str]:
    ident = []
    for title, key in (("Release", "vllm_version"), ("Engine", "engine"), ("GPU", "gpu"), ("Model", "model")):
        item = run.get(key)
        if item:
            ident.append((title, str(item["value"]), f"({item['confidence']})", item["basis"]))
    if run.get("model") is None:
        ident.append(("Model", "not named in the log", "", "see the consistent catalog models below"
                      if run["candidates"] else "no catalog model matches the logged figures"))
    return _table(ident, "  ")


def _render_observed(run: dict) -> list[str]:
    from .observed import LABELS

    lines = ["", "  What the log printed (rank 0 where the rank shows)"]
    lines += _table([(LABELS.get(key, key), _value(key, value), "") for key, value in run["observed"].items()])
    others = {rank: figures for rank, figures in run["per_rank"].items() if rank != "rank 0"}
    if others:
        lines.append("  Other ranks:")
        for rank, figures in list(others.items())[:8]:
            text = ", ".join(f"{LABELS.get(k, k)} {_value(k, v)}" for k, v in figures.items())
            lines.append(f"    {rank}: {text}")
    if run["kv_pool"]:
        pool = run["kv_pool"]
        lines.append(f"  KV pool: {pool['num_gpu_blocks']:,} blocks x {pool['bytes_per_block']:,} B "
                     f"({pool['block_size']} tokens per block of {pool['model']}) = {pool['gib']:.2f} GiB")
    return lines


def _render_settings(run: dict) -> list[str]:
    if not run["settings"]:
        return []
    rows = [(name, _value(name, value), run["settings_basis"][name]["confidence"],
             run["settings_basis"][name]["basis"]) for name, value in run["settings"].items()]
    return ["", "  Settings (vLLM's names)"] + _table(rows)


def _render_candidates(run: dict) -> list[str]:
    if not run["candidates"]:
        return []
    lines = ["", "  Catalog models consistent with the logged weights and KV figures:"]
    rows = []
    for c in run["candidates"]:
        kv = ("KV checks pass" if c["kv_consistent"] else "KV not checkable" if c["kv_consistent"] is None
              else "KV mismatch")
        pool = f", pool {c['kv_pool_gib']:.2f} GiB" if c.get("kv_pool_gib") is not None else ""
        rows.append((c["model"], f"TP{c['tensor_parallel_size']}", c["precision"],
                     f"{c['weights_gib']:.4f} GiB ({c['weights_error']:+.2%})",
                     f"{c['kv_bytes_per_token'] // 1024} KiB/token{pool}; {kv}"))
    return lines + _table(rows)


def _render_reconciliation(run: dict) -> list[str]:
    from .observed import LABELS

    rec = run["reconciliation"]
    if not rec:
        return []
    why = run["model_used_for_prediction"]["why"]
    lines = ["", f"  Observed vs predicted: {rec['model']} ({why}) on {rec['gpu']}, vLLM {rec['vllm_version']} "
                 f"{rec['engine'].upper()}"]
    rows = [("figure", "observed", "predicted", "gap", "likely cause")]
    for row in rec["figures"]:
        gap = "" if row.get("relative_gap") is None else f"{row['relative_gap']:+.1%}"
        rows.append((LABELS.get(row["key"], row["key"]), _value(row["key"], row["observed"]),
                     _value(row["key"], row["predicted"]), gap, row["cause"]))
    lines += _table(rows)
    return lines + [f"    note: {note}" for note in rec["notes"]]


def _render_smi(run: dict) -> list[str]:
    smi = run["nvidia_smi_breakdown"]
    if not smi:
        return []
    total = f" of {smi['total_mib']:,} MiB" if smi.get("total_mib") else ""
    lines = ["", f"  nvidia-smi {smi['gpu']}: {smi['used_mib']:,} MiB used{total}, made of"]
    rows = [(part["what"], f"{part['gib']:.2f} GiB", part["basis"]) for part in smi["parts"]]
    if smi["remaining_gib"] >= 0:
        rows.append(("remaining", f"{smi['remaining_gib']:.2f} GiB", smi["verdict"]))
        return lines + _table(rows) + [f"    {smi['summary']}"]
    # the parts add up to more than the reading: no negative part, the prediction is what disagrees
    return lines + _table(rows) + [f"    the parts come to {-smi['remaining_gib']:.2f} GiB more than the reading: "
                                   f"{smi['verdict']}"]


def _render_what_if(run: dict) -> list[str]:
    lines = []
    if run["anomalies"]:
        lines += ["", "  Anomalies"] + [f"    - {text}" for text in run["anomalies"]]
    shrink = run["what_if"]
    if shrink and shrink.get("scenarios"):
        base = shrink["baseline"]
        lines.append("")
        lines.append(f"  Flags that would shrink the footprint (now ~{base['current_nvidia_smi_mib']:,} MiB; each "
                     f"--gpu-memory-utilization is the least that still serves one {base['max_model_len']:,}-token "
                     "request)")
        rows = [(s["flags"], f"-{s['saving_mib'] / 1024:.1f} GiB",
                 f"-> ~{max(s['projected_nvidia_smi_mib'], s['predicted_nvidia_smi_mib']):,} MiB",
                 f"KV {s['kv_cache_tokens']:,} tokens ({s['max_concurrency']:g}x)") for s in shrink["scenarios"]]
        lines += _table(rows)
    return lines
