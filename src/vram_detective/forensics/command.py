"""`vram-detective logs LOG [--nvidia-smi FILE] [--model M] [--gpu G] [--json]`.

register() only declares arguments (argparse): the CLI imports this module for every command, so the
parser, the catalog and the predictor are imported inside run().
"""
from __future__ import annotations

import argparse
import contextlib
import io
from ..term import HelpFormatter  # --help fitted to the terminal

EXAMPLES = """examples:
  vram-detective logs vllm.log
  vllm serve Qwen/Qwen3-8B 2>&1 | tee vllm.log | vram-detective logs -
  vram-detective logs vllm.log --nvidia-smi smi.txt      # the default table, --query-gpu CSV, or -q -x XML
  vram-detective logs vllm.log --model Qwen/Qwen2.5-7B-Instruct-AWQ --gpu "RTX 4090" --json
  vram-detective logs --nvidia-smi smi.txt --model Qwen/Qwen3-8B     # no log: the utilization from the reading
"""


def _engine_word(text: str) -> str:
    from ..engine_choice import canonical

    return canonical(text)


def register(subparsers) -> None:
    from ..engines import DEFAULT_ENGINE, ENGINES

    parser = subparsers.add_parser(
        "logs", help="read a real vLLM, SGLang, llama.cpp or Ollama log (and nvidia-smi): who took the memory, and why",
        description="Parse an engine's startup log (vLLM of any release from 0.2 on; SGLang, llama.cpp and Ollama through "
                    "their own parsers): the figures each rank printed, the "
                    "settings and release it implies, the catalog models consistent with it, observed vs predicted "
                    "with the likely cause of each gap, what nvidia-smi's number is made of, which flags would "
                    "shrink the footprint, and, when the log goes on while serving, how much of the KV pool the "
                    "traffic used (the periodic 'KV cache usage' / 'token usage' lines).",
        epilog=EXAMPLES, formatter_class=HelpFormatter,
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
    parser.add_argument("--engine", dest="logs_engine", choices=tuple(ENGINES), type=_engine_word, default=None,
                        metavar="{" + ",".join(ENGINES) + "}",
                        help="the engine that ran, for nvidia-smi output read without a log (default: what the model "
                             f"means, else {DEFAULT_ENGINE}); a log names its own engine")
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
                                  getattr(args, "logs_tp", None), getattr(args, "logs_engine", None))
        else:
            if getattr(args, "logs_engine", None):
                raise ValueError("--engine is for nvidia-smi output read without a log: a log names its engine")
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
                 tp: int | None, engine: str | None = None, smi=None) -> dict:
    """nvidia-smi output and a model, no engine log: the value of the engine's pool lever that explains the
    reading (reading.py). `smi`: the reading already parsed (the web page's pasted one, the library's text)."""
    import sys

    from .nvidia_smi import parse_file, parse_nvidia_smi
    from .reading import reading_report

    if not nvidia_smi and smi is None:
        raise ValueError("give an engine log, or --nvidia-smi FILE with --model MODEL")
    if not model:
        raise ValueError("nvidia-smi output without a log needs --model (the model that ran)")
    if tp is not None and tp < 1:
        raise ValueError(f"--tensor-parallel-size must be 1 or more, not {tp}")
    if smi is None:
        smi = parse_nvidia_smi(sys.stdin.read()) if nvidia_smi == "-" else parse_file(nvidia_smi)
    return reading_report(smi, model, gpu, version, tp, engine)


def build_report(log: str, nvidia_smi: str | None = None, model: str | None = None, gpu: str | None = None,
                 vllm_version: str | None = None, stdin=None, ollama_ps: str | None = None, smi=None) -> dict:
    """`logs`' report of one log. `smi`: an nvidia-smi reading already parsed (the web page's pasted one)."""
    from .engine_logs import build_engine_report, detect_engine
    from .streaming import HEAD_BYTES, LISTED_RUNS, parse_stream_bounded

    _check_inputs(log, nvidia_smi, model, gpu)
    extra = _read_text(ollama_ps) if ollama_ps else None
    smi = smi if smi is not None else _read_nvidia_smi(nvidia_smi)
    name = "standard input" if log == "-" else log
    with _log_stream(log, stdin) as stream:
        head = _head(stream, 1 << 20)
        if log != "-" and nvidia_smi is None and _is_nvidia_smi(head):
            raise ValueError(f"{log} is nvidia-smi output, not an engine log: pass it with --nvidia-smi "
                             f"(vram-detective logs ENGINE_LOG --nvidia-smi {log})")
        engine = _log_engine(detect_engine(_head(stream, HEAD_BYTES)), vllm_version, extra)  # the head names it
        if engine.logs.analyse is None or engine.logs.reader is None:  # read whole (first and last parts)
            text, skipped = bounded_text(stream)
            return build_engine_report(text, engine.name, log=name, model=model, gpu=gpu, version=vllm_version,
                                       smi=smi, extra=extra, skipped_bytes=skipped)
        # streamed run by run with bounded memory (streaming.py), each of the last runs analysed by the engine
        bounded = parse_stream_bounded(stream, name, keep=LISTED_RUNS, reader=engine.logs.reader())
    return engine.logs.analyse(log, bounded, head, model, gpu, vllm_version, smi)


def _log_engine(name: str, version: str | None, extra: str | None):
    """The engine that wrote the log, once the options fit it: its release (bad input when it has none such)
    and another output read with the log (`ollama ps` goes with Ollama's log only)."""
    from ..engines import ENGINES, get_engine

    engine = get_engine(name)
    if extra is not None and not engine.logs.companion:
        owner = next(get_engine(other) for other in ENGINES if get_engine(other).logs.companion)
        raise ValueError(f"--ollama-ps goes with an {owner.label} server log (this log is not {owner.label}'s)")
    if version:
        engine.releases.resolve(version)  # an unknown release of this engine is bad input before any work
    return engine


def _check_inputs(log: str, nvidia_smi: str | None, model: str | None, gpu: str | None) -> None:
    """Bad input (both from standard input, an unknown GPU or model) is refused before any work."""
    if log == "-" and nvidia_smi == "-":
        raise ValueError("the log and --nvidia-smi cannot both be read from standard input")
    if gpu:
        from ..hardware import find_gpu

        find_gpu(gpu)  # an unknown name is bad input before any work
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


def bounded_text(stream) -> tuple[str, int]:
    """(the log as text, bytes of its middle left out) for the engines read whole (no streaming reader): all of
    it up to TEXT_BYTES, else its first TEXT_HEAD_BYTES and its last bytes, cut at line breaks (memory bounded
    whatever the log's size)."""
    stream.seek(0, 2)
    size = stream.tell()
    stream.seek(0)
    if size <= TEXT_BYTES:
        data = stream.read()
        skipped = 0
    else:
        head = stream.read(TEXT_HEAD_BYTES)
        stream.seek(size - (TEXT_BYTES - TEXT_HEAD_BYTES))
        tail = stream.read()
        data = head[:head.rfind(b"\n") + 1] + tail[tail.find(b"\n") + 1:]
        skipped = size - len(data)
    stream.seek(0)
    return data.decode("utf-8", "replace"), skipped


def _read_text(path: str) -> str:
    with open(path, "rb") as handle:
        return handle.read().decode("utf-8", "replace")


def _named_by_an_engine(model: str) -> bool:
    """Is `model` a name only an engine knows (a model in Ollama's local store)?"""
    from ..engines import ENGINES, get_engine
    from ..engines.base import resolve_model

    return any(resolve_model(get_engine(name), model) is not None for name in ENGINES)


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
    if "runs" not in report:  # a log read whole, its figures compared one by one (engine_logs.py)
        from .engine_logs import render_engine_report

        return "\n".join(paragraph(render_engine_report(report, columns).splitlines(), columns, "    "))
    _COLUMNS[0] = columns
    from ..engines import get_engine

    label = report.get("engine_label") or get_engine(report.get("engine")).label  # a run-by-run report
    lines = [f"{label} log: {report['log']} ({report['lines_read']:,} lines, {report['lines_with_figures']:,} with {label} "
             f"figures, {len(report['runs'])} run{'s' if len(report['runs']) != 1 else ''})"]
    if report.get("lines_cut"):
        lines.append(f"  ({report['lines_cut']} over-long lines were cut at 64 KiB)")
    earlier = report.get("earlier_runs")
    from .streaming import DEEP_RUNS, LISTED_RUNS

    if earlier:
        lines.append(f"  {earlier['runs']:,} earlier startups (lines {earlier['lines'][0]:,}-{earlier['lines'][1]:,}) "
                     f"summarized: {earlier['started']:,} started, {earlier['failed']:,} failed; the last "
                     f"{LISTED_RUNS} are listed (--json: earlier_runs)")
    for run in report["runs"]:
        lines.append("")
        lines += _render_run(run, label, verbose)
    return "\n".join(paragraph([public(line, verbose) if line.strip() else line for line in lines], columns, "    "))


def _render_run(run: dict, label: str, verbose: bool = False) -> list[str]:
    from .answer import render_answer
    from .observed import LABELS

    failed = run["startup"]["failed"]
    outcome = ("FAILED: " + _first_sentence(run["startup"]["message"] or "") if failed else
               "started" if failed is False else "outcome not in the log")
    lines = [f"Run {run['run']} (lines {run['lines'][0]}-{run['lines'][1]}): {outcome}"]
    if run.get("summary_only"):
        from .streaming import DEEP_RUNS

        text = ", ".join(f"{LABELS.get(k, k)} {_value(k, v)}" for k, v in run["observed"].items())
        lines.append(f"  {text} (an earlier start: the last {DEEP_RUNS} runs are analysed in full)")
        if run.get("serving"):
            from .serving import serving_line

            lines.append("  " + serving_line(run["serving"]))
        return lines
    lines += render_answer(run, _COLUMNS[0], label)
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
    from .changes import what_if_lines

    return lines + what_if_lines(run["what_if"], _table)
