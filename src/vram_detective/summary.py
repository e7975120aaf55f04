"""The answer before the tables: does it start, what nvidia-smi will show and what it is made of (a stacked
bar), and the smallest footprint that still serves one full-length request.

Worded from the Breakdown only (its labels, component keys and settings), never from the engine's name,
so every engine gets the same summary.
"""
from __future__ import annotations

from dataclasses import dataclass

from .breakdown import Breakdown
from .units import GIB, least_hundredth

MIB = 1 << 20
_PARALLEL = ("tensor_parallel_size", "tp_size", "pipeline_parallel_size", "pp_size")


@dataclass(frozen=True)
class Smallest:
    """The least budget fraction (the engine's own setting and flag) that still serves one request."""

    flag: str
    value: float
    nvidia_smi_used_mib: int


def model_gpus(b: Breakdown) -> int:
    """GPUs one copy of the model is split over (tensor x pipeline parallel, in the engine's names)."""
    product = 1
    for setting in b.settings:
        if setting.name in _PARALLEL and isinstance(setting.value, int) and setting.value > 1:
            product *= setting.value
    return product


def budget_fraction(b: Breakdown):
    """The setting that sizes the budget (named in the budget's label, e.g. gpu_memory_utilization,
    mem_fraction_static), or None for an engine whose memory is a sum of buffers."""
    if not any(child.key.endswith("kv_cache") for child in b.components.children):
        return None
    for setting in b.settings:
        if isinstance(setting.value, float) and 0 < setting.value <= 1 and setting.name in b.components.label:
            return setting
    return None


def smallest_footprint(b: Breakdown, explain, flag_names: dict | None = None) -> Smallest | None:
    """Bisect the budget fraction down to the least (2 decimals) at which the engine still starts with one
    max-length request and room beyond the pool's error (intervals.starts_safely, fit's margin).
    `explain(name, value)` -> Breakdown (or raises: does not start). Each other fraction is the engine's own
    plan (its rounding and refusals decide whether it starts); the first one tried is where `b`'s pool, shrunk
    byte for byte, would hold one request, and `b` answers for its own fraction."""
    setting = budget_fraction(b)
    if setting is None or b.failure is not None:
        return None

    from .intervals import starts_safely

    def starts(value: float):
        try:
            trial = b if value == setting.value else explain(setting.name, value)
        except Exception:  # noqa: BLE001 - any refusal or bad value: it does not start there
            return None
        return trial if starts_safely(trial) else None  # fit's margin: room beyond the pool's error

    high, best = least_hundredth(starts, 0.01, float(setting.value), guess=_one_request_fraction(b, setting.value))
    if best is None or high >= setting.value - 0.01:
        return None
    flag = (flag_names or {}).get(setting.name) or "--" + setting.name.replace("_", "-")
    return Smallest(flag, high, best.nvidia_smi_used_mib)


def _one_request_fraction(b: Breakdown, fraction: float) -> float | None:
    """The budget fraction at which b's KV pool, shrunk byte for byte with the budget, holds one request with
    room beyond its error (the pool's relative error w: a pool of need / (1 - w))."""
    if b.max_concurrency <= 0 or b.kv_cache_bytes <= 0 or b.total_gpu_bytes <= 0:
        return None
    from .intervals import safe_room

    margin = safe_room(b)
    relative = 0.0 if margin is None else margin.error_gib * GIB / b.kv_cache_bytes
    if relative >= 1:
        return None
    needed = b.kv_cache_bytes / b.max_concurrency / (1 - relative)
    return fraction - (b.kv_cache_bytes - needed) / b.total_gpu_bytes


def bar_parts(b: Breakdown) -> list[tuple[str, float]]:
    """What nvidia-smi's figure is made of, in GiB: weights, KV pool, the rest it counts, and what is free."""
    used = b.nvidia_smi_used_mib * MIB
    weights, kv = b.weights_bytes, max(b.kv_cache_bytes, 0)
    rest = max(used - weights - kv, 0)
    labels = [child.label for child in b.outside_budget.children if child.bytes > 0]
    rest_label = "context, graphs" if labels else "other"
    free = max(b.total_gpu_bytes - max(used, weights + kv), 0)
    return [("weights", weights / GIB), ("KV pool", kv / GIB), (rest_label, rest / GIB), ("free", free / GIB)]


_FILLS = ("█", "▓", "▒", "·")


def bar_lines(b: Breakdown, columns: int | None) -> list[str]:
    parts = bar_parts(b)
    total = sum(amount for _, amount in parts) or 1.0
    size = max(20, min(columns or 100, 100) - 2)
    cells, used = [], 0
    cumulative = 0.0
    for (_, amount), fill in zip(parts, _FILLS):
        cumulative += amount
        share = max(round(size * cumulative / total) - used, 1 if amount > 0.005 else 0)
        share = min(share, size - used)
        cells.append(fill * share)
        used += share
    legend = "  ".join(f"{fill} {label} {amount:.2f}" for (label, amount), fill in zip(parts, _FILLS)) + " GiB"
    from .term import wrap

    return ["[" + "".join(cells) + "]", axis_line(total, size)] + wrap(legend, columns, " ", " ")


_STEPS = (0.5, 1, 2, 4, 5, 8, 10, 16, 20, 25, 40, 50, 80, 100, 200, 500, 1000)


def axis_line(total_gib: float, size: int) -> str:
    """The bar's scale, as wide as the bar with its brackets: '0', round GiB ticks where they fall on the bar
    (one cell = total / size GiB) and the card's total at the right end ('0    4    8  ...  23.65 GiB')."""
    width = size + 2
    end = f"{total_gib:.2f} GiB"
    line = [" "] * width
    line[0] = "0"
    # ticks at least 6 cells apart, and clear of the end label
    step = next((s for s in _STEPS if size * s / total_gib >= 6), total_gib) if total_gib > 0 else 1
    free_until = width - len(end) - 1
    tick = step
    while tick < total_gib:
        text = f"{tick:g}"
        at = 1 + round(size * tick / total_gib) - len(text) // 2
        if at + len(text) >= free_until:
            break
        if at > 1 and line[at - 1] == " " and all(c == " " for c in line[at:at + len(text)]):
            line[at:at + len(text)] = text
        tick += step
    line[width - len(end):] = end
    return "".join(line).rstrip()


# up to this many GPUs each gets its own bar; beyond it, GPUs with the same figures share one (labelled with all)
MAX_BARS = 8


def per_gpu_words(devices) -> str:
    """"nvidia-smi ≈ 17,726 MiB on GPU 0, 17,759 MiB on GPU 1 (of 24,218 MiB each)", or "on each of 4 GPUs"."""
    if len(devices) == 1:  # one unit per sentence
        return (f"nvidia-smi ≈ {devices[0].nvidia_smi_used_mib:,} MiB on {devices[0].name} of "
                f"{devices[0].total_bytes / MIB:,.0f} MiB")
    each = f"of {devices[0].total_bytes / MIB:,.0f} MiB each"
    if len({d.nvidia_smi_used_mib for d in devices}) == 1:
        return f"nvidia-smi ≈ {devices[0].nvidia_smi_used_mib:,} MiB on each of {len(devices)} GPUs ({each})"
    if len(devices) > 4:
        used = [d.nvidia_smi_used_mib for d in devices]
        return f"nvidia-smi ≈ {min(used):,}-{max(used):,} MiB per GPU on {len(devices)} GPUs ({each})"
    return ("nvidia-smi ≈ " + ", ".join(f"{d.nvidia_smi_used_mib:,} MiB on {d.name}" for d in devices)
            + f" ({each})")


def device_groups(devices) -> list[tuple[str, object]]:
    """(label, device) per bar: one per GPU, or with more than MAX_BARS GPUs, one per run of GPUs whose figures
    are the same (tensor-parallel ranks of one stage), labelled "GPU 0-7 (each)"."""
    if len(devices) <= MAX_BARS:
        return [(f"{d.name} ({d.role})" if d.role else d.name, d) for d in devices]
    groups: list[list] = []
    for d in devices:
        key = (d.weights_bytes, d.kv_cache_bytes, d.nvidia_smi_used_mib, d.total_bytes)
        if groups and groups[-1][0] == key:
            groups[-1][1].append(d)
        else:
            groups.append([key, [d]])
    out = []
    for _, members in groups:
        first, last = members[0], members[-1]
        label = first.name if len(members) == 1 else f"{first.name}-{last.name.split()[-1]} (each)"
        out.append((label, first))
    return out


def device_bars(devices, columns: int | None) -> list[str]:
    """One bar per GPU: its name and role, what nvidia-smi shows there, its parts over its card."""
    from .forensics.bars import device_bar_lines
    from .term import wrap

    out = []
    for label, d in device_groups(devices):
        out += wrap(f"{label}: nvidia-smi ≈ {d.nvidia_smi_used_mib:,} MiB", columns, "", "  ")
        out += device_bar_lines(d, columns)
    return out


def _first_sentence(text: str) -> str:
    head = text.split(". ")[0].strip()
    return head if head.endswith(".") else head + "."


def verdict(b: Breakdown, columns: int | None, smallest: Smallest | None = None, fit_hint: str | None = None,
            style=None) -> list[str]:
    """2-4 lines of answer and the stacked bar; a refusal and what to try instead when it would not start."""
    from .term import wrap

    paint = style or (lambda text, code: text)
    title = f"{b.engine_label} {b.engine_version}" + (f" ({b.engine_variant} engine)" if b.engine_variant else "")
    if b.failure is not None:
        out = wrap(f"{title} would refuse to start: {_first_sentence(b.failure.message)}", columns, "", "  ")
        out = [paint(line, "31") for line in out]
        if b.failure.largest_fitting_max_model_len:
            out += wrap(f"The longest context that fits: {b.failure.largest_fitting_max_model_len:,} tokens.", columns)
        if fit_hint:
            out += wrap(f"try: {fit_hint}", columns, "", "     ")
        return out
    # one unit per sentence: nvidia-smi's MiB, the card's total in MiB too (as the web page's bar title)
    if b.devices:
        out = wrap(paint(f"Starts on {title}: {per_gpu_words(b.devices)}.", "1"), columns, "", "  ")
        out += device_bars(b.devices, columns)
    else:
        gpus = model_gpus(b)
        where = f" on each of {gpus} GPUs" if gpus > 1 else ""
        out = wrap(paint(f"Starts on {title}: nvidia-smi ≈ {b.nvidia_smi_used_mib:,} MiB{where} "
                         f"of {b.total_gpu_bytes / MIB:,.0f} MiB.", "1"), columns, "", "  ")
        out += bar_lines(b, columns)
    notes = []
    fraction = budget_fraction(b)
    if fraction is not None:
        notes.append(f"The KV pool is pre-allocated to fill {fraction.name} {fraction.value:g} of the GPU, "
                     f"whatever the load")
    peak = b.components.find("activation_peak")
    if peak is not None and peak.bytes > 0:
        notes.append(f"the {peak.bytes / GIB:.2f} GiB {peak.label} is freed before the pool is sized")
    if notes:
        out += wrap("; ".join(notes) + ".", columns)
    if smallest is not None:
        out += wrap(f"Smallest safe footprint for one {b.max_model_len:,}-token request (room beyond the KV "
                    f"pool's error, as fit counts it): {smallest.flag} {smallest.value:.2f} → ≈ "
                    f"{smallest.nvidia_smi_used_mib:,} MiB.", columns)
    return out
