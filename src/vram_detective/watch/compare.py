"""The watched engine beside the prediction for its model and GPU, and a simulation of the traffic it saw."""
from __future__ import annotations

from dataclasses import replace

GIB = 1 << 30
SIMULATED_SECONDS = 120.0  # arrivals of the observed rate over this long (at least 40, at most 400 requests)


def compare(args, live) -> dict:
    """{"lines": [...], "notes": [...], "prediction": {...}, "simulation": {...}} (what could be said)."""
    out: dict = {"lines": [], "notes": []}
    model = args.model or live.model
    gpu = _gpu(args, out)
    if not model or gpu is None:
        out["notes"].append("pass MODEL and --gpu (or --gpu auto) to set these figures beside the prediction")
        return out
    engine = args.engine_name if getattr(args, "engine_given", False) else live.engine
    settings = _settings(args, live, engine)
    try:
        breakdown = _explain(model, gpu, engine, args.engine_version, settings, args)
    except Exception as error:  # noqa: BLE001 - a model the tool cannot size is a note here, not the end of watch
        out["notes"].append(f"no prediction for {model}: {str(error).splitlines()[0] if str(error) else error}")
        return out
    if not args.engine_version:
        out["notes"].append(f"the metrics do not name the release: predicted with {breakdown.engine_label} "
                            f"{breakdown.engine_version}, the newest modelled (pass --engine-version)")
    _prediction_lines(out, live, breakdown)
    if live.arrival_rate and live.prompt_mean and live.output_mean:
        _simulation(out, live, model, gpu, engine, args.engine_version, settings, args)
    elif live.counts_requests:
        out["notes"].append("no finished requests between the scrapes: nothing to simulate (watch longer: "
                            "--samples / --interval)")
    return out


def _gpu(args, out):
    from .. import api
    from ..hardware import parse_memory_size

    if (args.gpu or "").strip().lower() == "auto":
        from ..local_gpus import machine_gpus

        found = machine_gpus()
        if not found:
            out["notes"].append("--gpu auto found no GPU here")
            return None
        # the memory in use now is mostly the watched engine's own: predict for the card as it was before it started
        out["notes"].append(f"--gpu auto: {found[0][1].short_name}, taken as empty (what is in use now is the "
                            "running engine's)")
        return replace(found[0][1], in_use_bytes=0)
    memory = parse_memory_size(args.gpu_memory) if args.gpu_memory else None
    if args.gpu is None and memory is None:
        return None
    return api.resolve_gpu(args.gpu, memory)


def _settings(args, live, engine: str) -> dict:
    """The engine's settings its metrics state (vLLM's cache_config_info), then the flags given here."""
    from ..engines import get_engine

    settings = dict(live.settings) if engine == live.engine else {}
    for flag in get_engine(engine).launch.flags:
        value = getattr(args, flag.setting, None)
        if value is not None and flag.setting != "model":
            settings[flag.setting] = value
    return settings


def _explain(model, gpu, engine, version, settings, args):
    from .. import api

    return api.explain(model, gpu, engine=engine, engine_version=version, source=args.source,
                       revision=args.revision, hf_token=args.hf_token, gguf_file=args.gguf_file, **settings)


def _prediction_lines(out: dict, live, breakdown) -> None:
    pool = breakdown.kv_cache_bytes
    out["prediction"] = {"engine_version": breakdown.engine_version, "kv_cache_bytes": pool,
                         "kv_cache_tokens": breakdown.kv_cache_tokens, "gpu": breakdown.gpu_name}
    head = f"predicted ({breakdown.engine_label} {breakdown.engine_version} on {breakdown.gpu_name}): "
    if breakdown.failure is not None:
        out["lines"].append(head + f"would not start: {breakdown.failure.message}")
        return
    out["lines"].append(head + f"a {pool / GIB:.1f} GiB pool, {breakdown.kv_cache_tokens:,} tokens")
    if live.pool_tokens and breakdown.kv_cache_tokens:
        off = live.pool_tokens / breakdown.kv_cache_tokens - 1
        out["lines"].append(f"the engine reports {live.pool_tokens:,} tokens: {off:+.1%} against the prediction")
        out["prediction"]["reported_vs_predicted"] = round(off, 4)
    if live.usage_peak is not None:
        out["lines"].append(f"the pool peaks at {live.usage_peak:.0%} of the predicted {pool / GIB:.1f} GiB "
                            f"({live.usage_peak * pool / GIB:.1f} GiB)")
        out["prediction"]["peak_bytes"] = int(live.usage_peak * pool)


def observed_workload(live):
    """The traffic the scrapes saw as a trace: arrivals at the observed rate, lengths from the histograms."""
    from ..simulate.workloads import Request, Workload
    from .report import lengths

    count = int(min(400, max(40, live.arrival_rate * SIMULATED_SECONDS)))
    prompts = lengths(live.prompt_buckets, live.prompt_mean, count)
    outputs = lengths(live.output_buckets, live.output_mean, count)
    # interleave long and short (the histogram order is sorted): request i takes every 7th quantile
    order = sorted(range(count), key=lambda i: (i * 7) % count)
    trace = tuple(Request(i / live.arrival_rate, prompts[j], outputs[j], session=f"watched-{i}")
                  for i, j in enumerate(order))
    return Workload("observed", trace=trace, description=f"the watched traffic: {live.arrival_rate:.2f} requests/s, "
                                                         f"prompts ~{live.prompt_mean:.0f}, outputs ~"
                                                         f"{live.output_mean:.0f} tokens")


def _simulation(out: dict, live, model, gpu, engine, version, settings, args) -> None:
    from ..simulate.fit import fit_workload

    workload = observed_workload(live)
    try:
        found = fit_workload(model, gpu, workload, engine=engine, engine_version=version, settings=settings,
                             source=args.source, revision=args.revision, hf_token=args.hf_token,
                             gguf_file=args.gguf_file)
    except (ValueError, NotImplementedError) as error:
        out["notes"].append(f"no simulation: {str(error).splitlines()[0]}")
        return
    out["simulation"] = dict(found.to_dict(), requests=len(workload.trace), description=workload.description)
    if found.feasible:
        out["lines"].append(f"at this traffic {found.lever.text(found.value)} would still serve it "
                            f"({found.needed_bytes / GIB:.1f} GiB of pool; {len(workload.trace)} simulated requests)")
    else:
        out["lines"].append(f"at this traffic: {found.reason}")
