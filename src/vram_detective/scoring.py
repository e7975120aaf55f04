"""Accuracy against real engine logs (groundtruth/SCHEMA.md cases), the engine-neutral part of `score`: reading
case files, resolving a case's model the way `explain` does, and the tables, intervals and text of a report.
Each engine plans a case from its own fields and compares the figures its log printed (engines/base.py
CaseScoring)."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from . import fidelity
from .engines import DEFAULT_ENGINE, get_engine

# Architecture tags reported in their own tables (issue 4).
ARCHITECTURE_TAGS = ("moe", "mla", "hybrid", "multimodal", "lora", "speculative")
# Tags SCHEMA.md asks to report apart.
SEPARATE_TAGS = ("non-nvidia", "approximate", "shared-gpu")


def shipped_case_files() -> list[Path]:
    """The ground truth shipped with the tool: a checkout's groundtruth/dev*.jsonl, else the copy `pip install`
    puts under <prefix>/share/vram-detective/groundtruth (pyproject data-files)."""
    import sys

    for folder in (Path(__file__).resolve().parents[2] / "groundtruth",
                   Path(sys.prefix) / "share" / "vram-detective" / "groundtruth"):
        files = sorted(folder.glob("dev*.jsonl"))
        if files:
            return files
    raise FileNotFoundError("no ground truth found (groundtruth/dev*.jsonl of a checkout, or "
                            f"{Path(sys.prefix) / 'share' / 'vram-detective' / 'groundtruth'}): give a JSONL file")


def load_cases(path: str) -> list[dict]:
    """Every case of a JSONL file; a line that is not a case object is an error naming its line."""
    cases, unreadable = read_cases(path)
    if unreadable:
        raise ValueError(f"{path}:{unreadable[0]['line']}: {unreadable[0]['reason']}")
    return cases


def read_cases(path: str) -> tuple[list[dict], list[dict]]:
    """(cases, unreadable lines): a line that is not a JSON object with an `id` is listed with its number and
    why, and the rest of the file is still read (`score` scores what it can)."""
    return read_case_text(Path(path).read_text(encoding="utf-8"))


def read_case_text(text: str) -> tuple[list[dict], list[dict]]:
    """read_cases for JSONL text held in memory (the web API's body)."""
    cases, unreadable = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            case = json.loads(line)
        except json.JSONDecodeError as error:
            unreadable.append({"line": number, "reason": f"not valid JSON ({error.msg})"})
            continue
        if not isinstance(case, dict) or not case.get("id"):
            unreadable.append({"line": number, "reason": "not a case (a JSON object with an `id`)"})
            continue
        problem = case_shape_problem(case)
        if problem:
            unreadable.append({"line": number, "reason": problem})
            continue
        cases.append(case)
    return cases, unreadable


# each field's JSON type (groundtruth/SCHEMA.md); absent or null is always allowed
_FIELD_TYPES = {"id": (str,), "source": (str,), "engine": (str,), "engine_version": (str,),
                "engine_version_basis": (str,), "engine_path": (str,), "model": (str,), "gpu": (str,),
                "num_gpus": (int,), "settings": (dict,), "plan_settings": (dict,), "observed": (dict,),
                "model_config": (dict,), "log": (str,), "tags": (list,), "notes": (str,), "supplement_basis": (str,)}


def case_shape_problem(case: dict) -> str | None:
    """Why a case object does not have SCHEMA.md's shape (a field of the wrong type, a GPU count below one, an
    observed figure that is not a finite number), or None: the scorers read only well-formed cases."""
    import math

    for key, types in _FIELD_TYPES.items():
        value = case.get(key)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            return f"`{key}` is {type(value).__name__}, not {types[0].__name__} (groundtruth/SCHEMA.md)"
    if case.get("num_gpus") is not None and case["num_gpus"] < 0:
        return f"`num_gpus` is {case['num_gpus']}: 0 (a CPU run) or more"
    if not all(isinstance(tag, str) for tag in case.get("tags") or []):
        return "`tags` is a list of strings"
    for key in ("settings", "observed"):
        if key in case and not isinstance(case[key], dict):
            return f"`{key}` is {type(case[key]).__name__}, not an object (groundtruth/SCHEMA.md)"
    for key, value in (case.get("observed") or {}).items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not isinstance(value, (int, float, str)) or number and not (math.isfinite(value) and abs(value) < 1e12):
            return f"observed `{key}` is {str(value)[:40]}: a number as the engine printed it (GiB, MiB or a count)"
    return None


@dataclass(frozen=True)
class CaseModel:
    """The model a case ran, resolved the way `explain` resolves a name, and how (for the case's row)."""
    spec: object  # ModelSpec
    origin: str  # "case model_config", "catalog", "hub", "local", "gguf"
    note: str = ""  # said in the row: weights sized from config.json only, the case's own config
    gguf: object = None  # the GGUF header's tensor table when the case's file is at hand


_PAREN = re.compile(r"\s*\(.*\)\s*$")


def case_model(case: dict, catalog_only: bool = False) -> CaseModel | str:
    """The case's model spec: its `model_config` (a supplement, groundtruth/SCHEMA.md), else `model` through the
    sources `explain` reads (catalog, then the local Hugging Face cache or the Hub; only the catalog with
    `catalog_only`). A string says why there is none."""
    from .api import model_source
    from .model.config import parse_config
    from .model.spec import ConfigError

    model = _PAREN.sub("", str(case.get("model") or "")).strip()  # 'repo (ollama tag)' names the repo
    gguf_file = str((case.get("settings") or {}).get("gguf_file") or "")
    if gguf_file.endswith(".gguf") and Path(gguf_file).expanduser().is_file():
        # the file the case ran is at hand: its header is the model (tensor types included), as `explain FILE` reads it
        found = model_source(str(Path(gguf_file).expanduser()), "gguf")
        return CaseModel(parse_config(found.config, name=found.repo_id), "gguf", f"GGUF header of {gguf_file}",
                         found.checkpoint)
    if isinstance(case.get("model_config"), dict):
        config = case["model_config"]
        try:
            spec = parse_config(config, name=model or (config.get("architectures") or ["model"])[0])
        except ConfigError as error:
            return f"model_config: {error}"
        return CaseModel(spec, "case model_config", "model shape from the case's model_config")
    if not model:
        return "model not named in the case"
    try:
        found = model_source(model, "catalog" if catalog_only else None)
        spec = parse_config(found.config, name=found.repo_id)
    except LookupError:
        if catalog_only:
            return f"{model} not in the catalog"
        return f"{model}: no config.json in the local Hugging Face cache or the Hub, and not in the catalog"
    except ValueError as error:
        return str(error).splitlines()[0]
    note = ""
    if found.origin == "hub" and found.checkpoint is None:
        note = f"weights sized from config.json ({found.provenance}: no safetensors headers)"
    return CaseModel(spec, found.origin, note)


def sizable_case_model(case: dict, catalog_only: bool) -> CaseModel | str:
    """The case's model when its GPU can be sized too, else why not (the model's reason first)."""
    model = case_model(case, catalog_only)
    if isinstance(model, str):
        return model
    return _unknown_gpu(case) or model


def _unknown_gpu(case: dict) -> str | None:
    """Why a case's GPU cannot be sized: it names a card the GPU table lacks and the log printed no total."""
    from .hardware import UnknownGpuError, find_gpu

    name = str(case.get("gpu") or "").split(" + ")[0].strip()
    name = re.sub(r"^\d+\s*x\s*", "", name)  # '2x NVIDIA ...'
    if not name or (case.get("observed") or {}).get("total_gpu_memory_gib"):
        return None
    try:
        find_gpu(name)
    except UnknownGpuError:
        return f"unknown GPU {name!r} (not in the GPU table, no logged total)"
    return None


def half_unit(value: float) -> float:
    """Half of the last printed digit: 6.37 -> 0.005 (the rounding interval of a logged figure)."""
    text = repr(float(value))
    if "e" in text or "." not in text:
        return 0.5
    return 0.5 * 10 ** -len(text.split(".")[1])


def relative_error(predicted: float, observed: float) -> float:
    if observed == 0:
        return abs(predicted)
    return abs(predicted - observed) / abs(observed)


def is_separate(tags) -> bool:
    """Is a case reported apart from the headline (SCHEMA.md's non-nvidia / approximate / shared-gpu tags)?"""
    return any(tag in SEPARATE_TAGS for tag in tags)


def figure(key: str, predicted: float, observed: float) -> dict:
    """One compared figure: relative error and, for a size, the absolute error in GiB."""
    out = {"observed": observed, "predicted": round(predicted, 4), "rel_err": relative_error(predicted, observed)}
    gap = fidelity.abs_error_gib(key, predicted, observed)
    if gap is not None:
        out["abs_err_gib"] = round(gap, 4)
    return out


def refusal_misses(observed: dict, keys: tuple[str, ...]) -> dict:
    """A predicted refusal gives no figure: every number the log printed among `keys` is a miss, not a gap."""
    return {key: dict(figure(key, 0.0, observed[key]), predicted=None, rel_err=1.0, missed="predicted a refusal")
            for key in keys if isinstance(observed.get(key), (int, float)) and not isinstance(observed.get(key), bool)}


def score_cases(cases: list[dict], from_logs: bool = False, catalog_only: bool = False,
                unreadable: list[dict] | tuple = ()) -> dict:
    """Score every case, each with the engine its `engine` field names (the default engine when absent): the
    report's `cases` counts them all, and each engine's cases make a section of the same shape under its name
    (the default engine's first, the others by name). A case that cannot be planned is skipped with its reason,
    never the file; `unreadable` lines (read_cases) are listed. No case at all: the default engine's empty
    section."""
    by_engine: dict[str, list[dict]] = {}
    for case in cases:
        by_engine.setdefault(str(case.get("engine") or DEFAULT_ENGINE).lower(), []).append(case)
    if not by_engine:
        by_engine[DEFAULT_ENGINE] = []
    order = sorted(by_engine, key=lambda name: (name != DEFAULT_ENGINE, name))
    report: dict = {"cases": len(cases)}
    for name in order:
        report[name] = score_engine_cases(name, by_engine[name], from_logs, catalog_only)
    if unreadable:
        report["unreadable_lines"] = list(unreadable)
    return report


def engine_sections(report: dict) -> list[tuple[str, dict]]:
    """(engine, its section) of a `score` report, in the report's order."""
    return [(name, section) for name, section in report.items() if isinstance(section, dict) and "scored" in section]


def _with_coverage(section: dict, engine: str) -> dict:
    """Each scored prediction's shipped 90 % interval (intervals.py) and whether the logged figure is inside; the
    section's `interval_coverage` per figure and overall (headline cases)."""
    from . import intervals

    if "per_case" not in section:
        return section
    hits: dict[str, list[bool]] = {}
    for case in section["per_case"]:
        for name, figure in case["figures"].items():
            term = intervals.term_of(name)
            if term in intervals.NOT_PREDICTIONS or figure.get("predicted") is None:
                continue
            found = intervals.bounds(engine, term, figure["predicted"], case.get("era", "?"), case.get("gpu_class", "?"),
                                     setup=intervals.setup_of(case.get("gpus")))
            if found is None or isinstance(figure["observed"], bool):
                continue
            figure["interval_90"] = [round(found[0], 4), round(found[1], 4)]
            figure["inside"] = found[0] <= figure["observed"] <= found[1]
            if not case.get("separate"):
                hits.setdefault(term, []).append(figure["inside"])
    every = [hit for values in hits.values() for hit in values]
    section["interval_coverage"] = {
        "overall": {"n": len(every), "inside": sum(every), "share": round(sum(every) / len(every), 4) if every else None},
        **{term: {"n": len(values), "inside": sum(values), "share": round(sum(values) / len(values), 4)}
           for term, values in sorted(hits.items())}}
    return section


def score_engine_cases(name: str, cases: list[dict], from_logs: bool = False, catalog_only: bool = False) -> dict:
    """One engine's cases, each planned from its own fields and compared figure by figure by the engine
    (engines/base.py CaseScoring); with `from_logs`, each case's figures are re-read from its raw `log` by the
    engine's log reader first. A case that cannot be planned is skipped with its reason; an unknown engine's
    cases are all listed."""
    from .engines import ENGINES

    if name not in ENGINES:
        return {"cases": len(cases), "scored": 0,
                "skipped": [{"id": c.get("id"), "reason": f"unknown engine {name!r}"} for c in cases]}
    scoring = get_engine(name).scoring
    if from_logs and scoring.observed_from_log is not None:
        cases = [dict(case, observed=scoring.observed_from_log(case.get("log", ""))) for case in cases]
    per_case, skipped = [], []
    for case in cases:
        try:
            entry, reason = scoring.score_case(case, catalog_only)
        except (ValueError, LookupError, KeyError, TypeError, AttributeError) as error:
            # a field the plan cannot read (a malformed setting: a number or an object where a name is read, a
            # release out of range): this case only
            entry, reason = None, f"cannot predict: {str(error).splitlines()[0] if str(error) else type(error).__name__}"
        if entry is None:
            skipped.append({"id": case.get("id"), "reason": reason})
        else:
            # the GPUs the run used (SCHEMA num_gpus), which the intervals group errors by
            per_case.append(dict(entry, gpus=_gpus_used(case)))
    return _with_coverage(_engine_report(scoring, cases, per_case, skipped), name)


def _gpus_used(case: dict) -> int:
    """GPUs a case's run used: its num_gpus (0 for a CPU run, absent when not stated: one)."""
    value = case.get("num_gpus")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def _engine_report(scoring, cases: list[dict], per_case: list[dict], skipped: list[dict]) -> dict:
    """An engine's section: the headline tables (cases tagged apart excluded), the verdict, era and GPU-class
    groups, and the tables the engine asks for (consistency checks, weights by format, architecture tags)."""
    keys = scoring.figures
    headline = [c for c in per_case if not c["separate"]]
    report = {"cases": len(cases), "scored": len(per_case), "skipped": skipped,
              "figures": _summaries(headline, keys),
              "figures_separate_tags": _summaries([c for c in per_case if c["separate"]], keys)}
    if scoring.consistency_figures:
        report["consistency_checks"] = fidelity.summaries(headline, scoring.consistency_figures)
    report.update({"startup_failed_agreement": _agreement(per_case), "verdict": fidelity.verdict_agreement(headline),
                   "by_era": fidelity.grouped(headline, keys, "era"),
                   "by_gpu_class": fidelity.grouped(headline, keys, "gpu_class")})
    if scoring.detail_tables:
        report["weights_by_format"] = _weights_by_format(headline, keys)
        report["by_tag"] = {tag: _summaries([c for c in per_case if tag in c.get("tags", ())], keys)
                            for tag in ARCHITECTURE_TAGS}
    report["per_case"] = per_case
    return report


def _percentile(values: list[float], fraction: float) -> float:
    return fidelity.percentile(values, fraction)


def _summaries(entries: list[dict], keys: tuple[str, ...]) -> dict:
    return fidelity.summaries(entries, keys)


def _agreement(entries: list[dict]) -> dict:
    pairs = [e["startup_failed"] for e in entries if "startup_failed" in e and e["startup_failed"]["observed"] is not None]
    agree = sum(1 for pair in pairs if bool(pair["observed"]) == bool(pair["predicted"]))
    return {"n": len(pairs), "agree": agree}


def _weights_by_format(entries: list[dict], keys: tuple[str, ...]) -> dict:
    groups: dict[str, list[dict]] = {}
    for entry in entries:
        if "weights_gib" in entry["figures"]:
            groups.setdefault(entry.get("weights_format", "?"), []).append(
                {"figures": {"weights_gib": entry["figures"]["weights_gib"]}})
    table = {name: _summaries(items, keys)["weights_gib"] for name, items in sorted(groups.items())}
    quantized = [item for name, items in groups.items() if name not in ("bfloat16", "float16", "float32") for item in items]
    if quantized:
        table["all quantized formats"] = _summaries(quantized, keys)["weights_gib"]
    return table


def format_summary(report: dict) -> str:
    """One block per engine section (the default engine's first), then the unreadable lines."""
    from .engines import ENGINES

    blocks = [get_engine(name).scoring.format_section(section) for name, section in engine_sections(report)
              if name in ENGINES and "figures" in section]
    if report.get("unreadable_lines"):
        blocks.append("unreadable lines (not scored): " + "; ".join(
            f"{entry.get('file', 'line')}:{entry['line']}: {entry['reason']}" if entry.get("file")
            else f"line {entry['line']}: {entry['reason']}" for entry in report["unreadable_lines"]))
    return "\n\n".join(blocks)


def skip_counts(skipped: list[dict]) -> str:
    """Skips counted by reason (a model name folded out of 'X not in the catalog')."""
    reasons: dict[str, int] = {}
    for skip in skipped:
        reason = skip["reason"]
        reason = "not in the catalog" if reason.endswith("not in the catalog") else reason
        reasons[reason] = reasons.get(reason, 0) + 1
    return "; ".join(f"{count} x {reason}" for reason, count in sorted(reasons.items(), key=lambda x: -x[1]))


def model_notes(section: dict) -> list[str]:
    notes = [f"{case['id']}: {case['model_note']}" for case in section.get("per_case", [])
             if case.get("model_note") and "config.json" in case["model_note"]]
    return ["models sized from config.json only: " + "; ".join(notes)] if notes else []


_HEADER = f"  {'figure':<32} {'n':>4} {'median':>9} {'p90':>9} {'max':>9} {'|GiB| med':>10} {'|GiB| p90':>10}"


def _row(name: str, stats: dict, width: int = 32) -> str:
    gib = (f" {stats['median_abs_err_gib']:>10.3f} {stats['p90_abs_err_gib']:>10.3f}"
           if "median_abs_err_gib" in stats else "")
    return (f"  {name:<{width}} {stats['n']:>4} {stats['median_abs_rel_err']:>9.2%} "
            f"{stats['p90_abs_rel_err']:>9.2%} {stats['max_abs_rel_err']:>9.2%}{gib}")


def figure_table(title: str, figures: dict) -> list[str]:
    return [title, _HEADER] + [_row(key, stats) for key, stats in figures.items()] + [""]


def verdict_lines(verdict: dict) -> list[str]:
    """The start verdict's agreement and its confusion table (rows: the log; columns: the prediction)."""
    if not verdict or not verdict.get("n"):
        return ["start verdict: no case with a logged outcome"]
    width = max(28, *(len(row) + 1 for row in verdict["confusion"]))
    lines = [f"start verdict agrees with the log: {verdict['agree']}/{verdict['n']} ({verdict['rate']:.0%})",
             f"  {'log / predicted':<{width}}" + "".join(f"{name:>20}" for name in fidelity.VERDICTS)]
    for row, counts in verdict["confusion"].items():
        lines.append(f"  {row:<{width}}" + "".join(f"{counts.get(name, 0):>20}" for name in fidelity.VERDICTS))
    return lines


def coverage_lines(section: dict) -> list[str]:
    coverage = section.get("interval_coverage", {})
    overall = coverage.get("overall", {})
    if not overall.get("n"):
        return []
    parts = ", ".join(f"{term} {stats['inside']}/{stats['n']}" for term, stats in coverage.items() if term != "overall")
    return [f"observed figures inside their 90 % intervals: {overall['inside']}/{overall['n']} "
            f"({overall['share']:.0%}; data/intervals.json): {parts}"]


def grouped_lines(title: str, groups: dict, keys: tuple[str, ...]) -> list[str]:
    lines = [title, f"  {'group / figure':<42} {'n':>4} {'median':>9} {'p90':>9} {'max':>9} {'|GiB| med':>10} "
                    f"{'|GiB| p90':>10}"]
    for name, group in groups.items():
        verdict = group["verdict"]
        lines.append(f"  {name} ({group['cases']} cases; verdict {verdict['agree']}/{verdict['n']})")
        lines += [_row("  " + key, group["figures"][key], 42) for key in keys if key in group["figures"]]
    return lines + [""]


def format_engine_section(label: str, section: dict) -> str:
    """An engine's section of a `score` report as text, its label before each table."""
    lines = [f"{label}: cases: {section['cases']}, scored: {section['scored']}, skipped: {len(section['skipped'])}", ""]
    lines += figure_table(f"{label} scored cases (SCHEMA tags non-nvidia/approximate/shared-gpu excluded)",
                           section.get("figures", {}))
    lines += figure_table(f"{label} cases tagged non-nvidia / approximate / shared-gpu",
                           section.get("figures_separate_tags", {}))
    keys = tuple(section.get("figures", {}))
    for title, field in (("by release era", "by_era"), ("by GPU class", "by_gpu_class")):
        if section.get(field):
            lines += grouped_lines(f"{label} {title}", section[field], keys)
    agreement = section.get("startup_failed_agreement", {"agree": 0, "n": 0})
    lines.append(f"startup refused/started agrees with the log: {agreement['agree']}/{agreement['n']}")
    lines += verdict_lines(section.get("verdict", {}))
    lines += coverage_lines(section)
    lines += model_notes(section)
    lines.append("skipped by reason: " + skip_counts(section["skipped"]))
    lines.append("skipped: " + "; ".join(f"{skip['id']}: {skip['reason']}" for skip in section["skipped"]))
    return "\n".join(lines)


