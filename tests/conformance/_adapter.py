"""From the layer specs vLLM's own unit tests build (name -> FullAttentionSpec / SlidingWindowSpec / MambaSpec,
one dict per worker, bytes per worker) to this project's inputs, and back to the figures those tests assert.

The only production entry point used is `plan_kv_groups` / `AttentionLayer` (engines/vllm/kv_groups.py); when
their signatures change, this module is the one place to adapt.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pytest

from vram_detective.engines.vllm.kv_groups import KvGroupPlan, plan_kv_groups
from vram_detective.engines.vllm.kv_layers import AttentionLayer

Version = tuple[int, int, int]

# Releases whose test suites were read (`engine-tests vllm X`); 0.33.0 moved most of kv_cache_utils' tests
# to tests/v1/core/test_kv_cache_planning.py.
RELEASES: tuple[Version, ...] = ((0, 9, 2), (0, 10, 2), (0, 11, 0), (0, 14, 0), (0, 19, 0), (0, 24, 0),
                                 (0, 26, 0), (0, 28, 0), (0, 29, 0), (0, 32, 0), (0, 33, 0))


def since(first: Version, until: Version | None = None) -> tuple[Version, ...]:
    """The releases read whose suite holds an expectation: `first` up to `until` (inclusive)."""
    return tuple(v for v in RELEASES if v >= first and (until is None or v <= until))


def label(version: Version) -> str:
    return "vllm-" + ".".join(map(str, version))


@dataclass(frozen=True)
class Spec:
    """One layer as the engine tests build it; defaults are their helpers' defaults (block 16, 2 KV heads of
    64, float32)."""

    kind: str = "full"  # "full", "sliding", "mamba"
    num_kv_heads: int = 2
    head_size: int = 64
    dtype_bytes: int = 4
    block_size: int = 16
    sliding_window: int | None = None
    mamba_state_bytes: int = 0  # MambaSpec: sum of prod(shape) x dtype over its state tensors
    shares: str | None = None  # kv_sharing_target_layer_name: the layer whose KV cache this one reads

    @property
    def page_bytes(self) -> int:
        if self.kind == "mamba":
            return self.mamba_state_bytes
        return 2 * self.block_size * self.num_kv_heads * self.head_size * self.dtype_bytes


def full(**kw) -> Spec:
    return Spec("full", **kw)


def sliding(window: int = 1, **kw) -> Spec:
    return Spec("sliding", sliding_window=window, **kw)


def mamba(shapes=((2, 512), (3, 32, 32)), dtype_bytes: int = 4) -> Spec:
    state = 0
    for shape in shapes:
        count = 1
        for dim in shape:
            count *= dim
        state += count * dtype_bytes
    return Spec("mamba", mamba_state_bytes=state)


def layer(spec: Spec, index: Mapping[str, int]) -> AttentionLayer:
    # a target name that is no layer of the model becomes -1, an index no layer has
    target = None if spec.shares is None else index.get(spec.shares, -1)
    return AttentionLayer(spec.kind, spec.page_bytes, spec.sliding_window, target)


@dataclass(frozen=True)
class Result:
    plan: KvGroupPlan
    names: tuple[str, ...]  # the global layer order

    def groups(self) -> list[list[str]]:
        """Worker 0's groups as lists of layer names (empty for a group it holds no layer of)."""
        return [[self.names[i] for i in group.layer_indices + group.shared_layer_indices]
                for group in self.plan.groups]


def plan(workers: Mapping[str, Spec] | Sequence[Mapping[str, Spec]], memory: int | Sequence[int], *,
         version: Version, max_model_len: int, max_num_batched_tokens: int = 2048,
         mamba_speculative_blocks: int = 0, **kw) -> Result:
    """get_kv_cache_configs(vllm_config, workers, memory) in this project's terms: one plan, worker 0's view."""
    if isinstance(workers, Mapping):
        workers = [workers]
    names: list[str] = []
    specs: dict[str, Spec] = {}
    for worker in workers:
        for name, spec in worker.items():
            if name not in specs:
                names.append(name)
                specs[name] = spec
    block_sizes = {spec.block_size for spec in specs.values()}
    if len(block_sizes) != 1:
        raise ValueError("the adapter passes one block size")
    budgets = [int(memory)] * len(workers) if isinstance(memory, int) else [int(m) for m in memory]
    index = {name: i for i, name in enumerate(names)}
    worker_layers = [[index[name] for name in worker] for worker in workers]
    result = plan_kv_groups(
        [layer(specs[name], index) for name in names], budgets, block_sizes.pop(), max_model_len, max_num_batched_tokens,
        256, version, "v1", worker_layers=worker_layers, async_scheduling=False,
        mamba_speculative_blocks=mamba_speculative_blocks, **kw)
    return Result(result, tuple(names))


def estimate_max_model_len(specs: Mapping[str, Spec], memory: int, *, version: Version, max_model_len: int,
                           **kw) -> int:
    """vLLM's estimate_max_model_len(config, specs, memory) called directly: `memory` is what the estimate
    searches in, so the null block a release keeps out of its startup check is handed back first."""
    first = plan(specs, memory, version=version, max_model_len=max_model_len, **kw).plan
    held_back = memory - first.fit_available_bytes
    return plan(specs, memory + held_back, version=version, max_model_len=max_model_len,
                **kw).plan.estimated_max_model_len


@dataclass(frozen=True)
class Case:
    """One expectation of an engine test, checked at each release whose suite asserts it."""

    engine_test: str
    part: str
    releases: tuple[Version, ...]
    check: Callable[[Version], None]
    xfail: str | None = None  # the reason, when the project is known to disagree


def registrar(cases: list[Case]):
    """A decorator factory adding checks to `cases`: @case(engine_test, part, releases[, xfail])."""
    def case(engine_test: str, part: str, releases, xfail: str | None = None):
        def register(check):
            cases.append(Case(engine_test, part, tuple(releases), check, xfail))
            return check
        return register
    return case


def params(cases: Sequence[Case]):
    """pytest params with ids `<engine test>[<part>]@vllm-<release>` (benchmarks/conformance.py reads them)."""
    for c in cases:
        for version in c.releases:
            marks = [pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else []
            yield pytest.param(c, version, id=f"{c.engine_test}[{c.part}]@{label(version)}", marks=marks)
