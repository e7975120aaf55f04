"""The simulate command's text report: the verdict first, then the occupancy plot and the figures."""
from __future__ import annotations

import re
import textwrap
from collections import Counter

from ..units import GIB
from .fit import WorkloadFit, shortfall_words, verdict_line
from .plot import occupancy_plot
from .result import MAX_LISTED_PREEMPTIONS, SimulationResult

WIDTH = 80


def _gib(blocks: float, result: SimulationResult) -> str:
    return f"{blocks * result.block_bytes / GIB:.2f} GiB"


def preemption_causes(result: SimulationResult) -> list[tuple[str, int]]:
    """The listed preemptions grouped by cause (request numbers and positions left out), most frequent first."""
    counts = Counter()
    for p in result.preemption_log:
        cause = re.sub(r"request \d+", "a request", p.cause)
        cause = re.sub(r" at \d+ (tokens|cells)", "", cause)
        counts[f"{cause} ({p.mode})"] += 1
    return counts.most_common()


def report_text(b, workload: str, seed: int, result: SimulationResult, fit: WorkloadFit) -> str:
    variant = f" {b.engine_variant}" if b.engine_variant else ""
    head = f"{b.model} on {b.gpu_name}, {b.engine_label} {b.engine_version}{variant}; workload {workload} (seed {seed})"
    lines = textwrap.wrap(head, WIDTH) + textwrap.wrap("verdict: " + verdict_line(result, fit), WIDTH,
                                                        subsequent_indent="  ")
    lines += ["", occupancy_plot(result, width=WIDTH - 18), ""]  # "pool  |" + bars + "| 14.6 GiB"
    lines += _figures(result)
    if fit.feasible and fit.result is not None:
        lines.append(f"{'smallest pool':16}{fit.needed_blocks:,} blocks ({fit.needed_bytes / GIB:.2f} GiB), "
                     f"found in {fit.simulations} runs")
        lines.append(f"{'':16}{fit.lever.text(fit.value)}: {fit.pool_bytes / GIB:.2f} GiB, "
                     f"{fit.result.preempted_fraction:.1%} {shortfall_words(result.engine).some}")
    lines += [""] + [line for note in result.notes for line in textwrap.wrap(f"note: {note}", WIDTH,
                                                                            subsequent_indent="  ")]
    return "\n".join(lines)


def _figures(result: SimulationResult) -> list[str]:
    r, label = result, shortfall_words(result.engine).label
    lines = [
        f"{'blocks in use':16}peak {r.peak_blocks:,} ({_gib(r.peak_blocks, r)}), p99 {r.p99_blocks:,} "
        f"({_gib(r.p99_blocks, r)}), mean {r.mean_blocks:,.0f}",
        f"{'':16}of {r.pool_blocks:,} blocks of {r.block_size} token(s), {r.duration_s:,.0f} s simulated",
        f"{'requests':16}{r.requests:,} arrived, {r.finished:,} finished, {r.held_back_requests:,} held back "
        f"for blocks",
        f"{'at once (peak)':16}{r.peak_running:,} running, {r.peak_waiting:,} waiting",
    ]
    if r.preemptions:
        lines.append(f"{label:16}{r.preemptions:,} of {r.preempted_requests:,} request(s) "
                     f"({r.preempted_fraction:.1%} of requests)")
        for cause, count in preemption_causes(r)[:4]:
            lines += textwrap.wrap(f"{count:>6} x {cause}", WIDTH, initial_indent=" " * 16,
                                   subsequent_indent=" " * 25)
        if r.preemptions > MAX_LISTED_PREEMPTIONS:
            lines.append(f"{'':16}(causes of the first {MAX_LISTED_PREEMPTIONS} listed)")
    else:
        lines.append(f"{label:16}none")
    lines.append(f"{'prefix cache':16}{r.prefix_hit_rate:.0%} of prompt tokens hit "
                 f"({r.prefix_hit_tokens:,} of {r.prompt_tokens:,}, once per admission)")
    if r.lookup_queries:
        lines.append(f"{'':16}{r.engine_hit_rate:.1%} by the engine's own counter (every lookup)")
    lines.append(f"{'KV cache usage':16}peak {r.engine_usage_pct(r.peak_blocks):.1f}%, p99 "
                 f"{r.engine_usage_pct(r.p99_blocks):.1f}% (as the engine's stats line counts it)")
    swap = (f"out {r.swap_out_bytes / GIB:.2f} GiB, in {r.swap_in_bytes / GIB:.2f} GiB"
            if r.swap_out_bytes or r.swap_in_bytes else "none")
    lines.append(f"{'swap to CPU':16}{swap}")
    return lines
