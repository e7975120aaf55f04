"""The recurrent state vLLM allocates per tensor-parallel rank for each Mamba / linear-attention layer
(the layout itself, which layers are which, is model/hybrid.py) (design/vllm-memory.md §3.2).

Shapes follow vllm/model_executor/layers/mamba/mamba_utils.py (MambaStateShapeCalculator, 0.10-0.33)
and each model's get_mamba_state_shape_from_config:

- Mamba1 (Jamba): conv (conv_kernel - 1, intermediate / tp), ssm (intermediate / tp, d_state),
  intermediate = mamba_expand x hidden_size.
- Mamba2 (Bamba, GraniteMoeHybrid, Nemotron-H, Falcon-H1): conv (conv_kernel - 1 + num_spec,
  (intermediate + 2 n_groups' d_state) / tp), ssm (heads / tp, head_dim, d_state), n_groups' = n_groups
  + (tp - n_groups when n_groups % tp else 0).
- GatedDeltaNet (Qwen3-Next, Qwen3.5): conv (conv_kernel - 1 + num_spec, (2 k_heads k_dim + v_heads v_dim)
  / tp), ssm (v_heads / tp, v_dim, k_dim).
- Linear attention (MiniMax-Text-01): (heads / tp, head_dim, head_dim).

Dtypes: conv = mamba_cache_dtype (auto -> model dtype), ssm = mamba_ssm_cache_dtype (auto -> the conv
dtype), except where vLLM's per-model config hook overrides "auto": Nemotron-H takes the config's
`mamba_ssm_cache_dtype` (default float16), Qwen3.5 its `mamba_ssm_dtype` (NemotronHForCausalLMConfig /
Qwen3_5ForConditionalGenerationConfig in models/config.py, seen in 0.18).

The sizes come from the ModelSpec's mixer facts (model/hybrid.py reads each family's keys); the sharding,
the dtypes and the speculative conv rows are this engine's.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from ...model.dtypes import DTYPE_BYTES
from ...model.hybrid import HybridConfigError, MixerFacts
from .releases import rule_at

# the mamba cache dtypes accepted (model dtypes and vLLM's fp8 cache-dtype names)
MAMBA_CACHE_DTYPES = ("bfloat16", "float16", "float32", "fp8", "fp8_e4m3", "fp8_e5m2")


@dataclass(frozen=True)
class MambaState:
    """The recurrent state one Mamba / linear-attention layer holds per request on one rank."""

    mixer: str  # "mamba1", "mamba2", "gated_delta_net", "linear_attention"
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]

    @property
    def page_bytes(self) -> int:
        """MambaSpec.page_size_bytes before padding: sum of prod(shape) x dtype size."""
        return sum(prod(shape) * DTYPE_BYTES[dtype] for shape, dtype in zip(self.shapes, self.dtypes))


def _dtype(name: str | None, model_dtype: str) -> str:
    if name in (None, "auto"):
        return model_dtype
    text = str(name).replace("torch.", "")
    if text not in MAMBA_CACHE_DTYPES:
        raise HybridConfigError(f"unknown mamba cache dtype {name!r}")
    return text


def _extra_groups(n_groups: int, tp: int) -> int:
    return 0 if n_groups % tp == 0 else tp - n_groups


def _divide(value: int, tp: int, what: str) -> int:
    if value % tp:
        raise HybridConfigError(f"{what} = {value} is not divisible by tensor_parallel_size {tp}")
    return value // tp


def mamba_state(mixer: MixerFacts, tp: int, model_dtype: str, *, mamba_cache_dtype: str = "auto",
                mamba_ssm_cache_dtype: str = "auto", num_speculative_tokens: int = 0) -> MambaState:
    """The per-layer state of one Mamba / linear-attention layer on one rank (shapes and dtypes), from the
    ModelSpec's mixer facts (model/hybrid.py)."""
    if mixer.problem:
        raise HybridConfigError(mixer.problem)
    conv_dtype = _dtype(mamba_cache_dtype, model_dtype)
    if mamba_ssm_cache_dtype in (None, "auto"):
        if mixer.family == "nemotron_h":  # NemotronHForCausalLMConfig: the config's dtype, float16 by default
            ssm_dtype = _dtype(mixer.ssm_dtype or "float16", model_dtype)
        elif mixer.family == "qwen3_next" and mixer.ssm_dtype:
            ssm_dtype = _dtype(mixer.ssm_dtype, model_dtype)
        else:
            ssm_dtype = conv_dtype
    else:
        ssm_dtype = _dtype(mamba_ssm_cache_dtype, model_dtype)
    spec = int(num_speculative_tokens)
    kind = mixer.kind
    if kind == "mamba1":
        per_rank = _divide(mixer.intermediate, tp, "mamba intermediate size")
        conv = (mixer.conv_kernel - 1, per_rank)
        ssm = (per_rank, mixer.d_state)
        return MambaState(kind, (conv, ssm), (conv_dtype, ssm_dtype))
    if kind == "mamba2":
        groups = mixer.n_groups + _extra_groups(mixer.n_groups, tp)
        conv = (mixer.conv_kernel - 1 + spec,
                _divide(mixer.intermediate + 2 * groups * mixer.d_state, tp, "mamba conv dim"))
        ssm = (_divide(mixer.heads, tp, "mamba heads"), mixer.head_dim, mixer.d_state)
        return MambaState(kind, (conv, ssm), (conv_dtype, ssm_dtype))
    if kind == "gated_delta_net":
        k_heads, v_heads, k_dim, v_dim = mixer.key_heads, mixer.value_heads, mixer.key_head_dim, mixer.value_head_dim
        conv = (mixer.conv_kernel - 1 + spec, _divide(2 * k_heads * k_dim + v_heads * v_dim, tp, "GatedDeltaNet conv dim"))
        ssm = (_divide(v_heads, tp, "linear value heads"), v_dim, k_dim)
        return MambaState(kind, (conv, ssm), (conv_dtype, ssm_dtype))
    # linear attention (MiniMax): one state tensor in the conv dtype
    return MambaState(kind, ((mixer.heads // tp, mixer.head_dim, mixer.head_dim),), (conv_dtype,))


def _graph_batch(batch: int) -> int:
    """worker/model_runner.py _get_graph_batch_size (0.6) / VllmConfig.pad_for_cudagraph with the default
    capture sizes 1, 2, 4, 8, 16, ... (0.6.5-0.10): up to 2, 4, then the next multiple of 8."""
    if batch <= 2:
        return batch
    if batch <= 4:
        return 4
    return -(-batch // 8) * 8


def v0_mamba_batch(max_num_seqs: int, enforce_eager: bool, version: tuple, max_capture_size: int = 512) -> int:
    """The request slots V0's MambaCacheManager allocates (the model's forward builds it lazily):

    - 0.6.0-0.6.4.post1 (jamba.py forward): _get_graph_batch_size(max_num_seqs), eager or not;
    - 0.6.5-0.7.2 (jamba.py __init__): pad_for_cudagraph(max_num_seqs) capped at max_capture_size, but
      8192 + 2 with --enforce-eager;
    - 0.7.3-0.10.x (mamba_cache.py MambaCacheManager): max_num_seqs, padded to the CUDA-graph batch unless eager.
    """
    rule = rule_at(version, "v0_mamba_batch")
    if rule == "graph-batch":
        return _graph_batch(max_num_seqs)
    if rule == "capture-capped":
        return 8192 + 2 if enforce_eager else min(_graph_batch(max_num_seqs), max_capture_size)
    return max_num_seqs if enforce_eager else _graph_batch(max_num_seqs)


def v0_mamba_cache_bytes(state: MambaState, mamba_layers: int, max_num_seqs: int,
                         cudagraph_batch: int | None = None) -> int:
    """V0 MambaCacheManager (mamba_cache.py 0.7-0.10): conv and ssm tensors of
    [mamba_layers, max_batch, *shape], max_batch = max_num_seqs padded to the CUDA-graph batch size
    (pass it as `cudagraph_batch`) unless eager. Allocated inside the model at the first forward, so it
    sits in the profiled peak, outside the KV blocks."""
    batch = cudagraph_batch if cudagraph_batch is not None else max_num_seqs
    return mamba_layers * batch * state.page_bytes
