"""SGLang behind engines/base.py's interface: every part delegates to the SGLang modules beside this one.
Parts are built on first use, so importing this module is light."""
from __future__ import annotations

import re
from functools import cached_property

from ...units import GIB
from ..base import CaseScoring, LaunchLine, Levers, LogFormats, PoolSimulation, ReadingLever, Releases

# lines only SGLang prints (model_runner.py, memory_pool.py, scheduler.py), any release
_SGLANG_LINES = re.compile(r"Load weight (?:begin|end)\. .*avail mem=|KV Cache is allocated\.|Memory pool end\. avail mem="
                           r"|max_total_num_tokens=\d+|sglang\.launch_server|server_args=ServerArgs\(")


def _is_sglang_log(text: str) -> bool:
    return _SGLANG_LINES.search(text) is not None


def _observed(text: str) -> dict:
    from .log_parser import parse_log

    return parse_log(text)


def _lines(version, prediction, inputs=None, **figures) -> tuple[str, ...]:
    from .log_lines import log_lines

    return tuple(log_lines(prediction, version, inputs, **figures))


def _flag_names() -> dict[str, str]:
    from .launch import FLAGS

    return {flag.setting: flag.names[0] for flag in FLAGS}


def _answers():
    from . import advisor

    return advisor


class _NoFastPath(Exception):
    """SGLang has no vectorized sweep: the advisor loops over plan()."""


# SGLang's figures the comparison shows: observed key -> (label, how to read the prediction)
LOG_FIGURES = (
    ("load_begin_avail_mem_gb", "free before weights (GiB)", lambda b: b.figure("load_begin_avail_bytes") / GIB),
    ("weights_mem_usage_gb", "weights: mem usage (GiB)", lambda b: b.weights_bytes / GIB),
    ("load_end_avail_mem_gb", "free after weights (GiB)", lambda b: b.figure("load_end_avail_bytes") / GIB),
    ("kv_cache_tokens", "#tokens", lambda b: b.kv_cache_tokens),
    ("k_size_gb", "K size (GiB)", lambda b: b.kv_cache_bytes / 2 / GIB),
    ("mem_pool_end_avail_mem_gb", "Memory pool end avail (GiB)", lambda b: b.figure("mem_pool_end_avail_bytes") / GIB),
    ("cuda_graph_mem_usage_gb", "CUDA graphs (GiB)", lambda b: b.figure("cuda_graph_bytes") / GIB),
    ("max_running_requests", "max_running_requests", lambda b: b.figure("max_running_requests")),
    ("context_len", "context_len", lambda b: b.max_model_len),
    ("available_gpu_mem_gb", "available_gpu_mem (GiB)", lambda b: b.figure("available_gpu_mem_bytes") / GIB),
    ("nvidia_smi_used_mib", "nvidia-smi used (MiB)", lambda b: b.nvidia_smi_used_mib),
)


class SGLangEngine:
    name = "sglang"
    label = "SGLang"
    # the levers the web page shows as controls: (setting, kind, label, min, max, step)
    controls = (("mem_fraction_static", "range", "mem_fraction_static", 0.05, 0.99, 0.01),
                ("context_length", "range", "context length", 512, 131072, 512),
                ("max_running_requests", "range", "max_running_requests", 1, 1024, 1),
                ("chunked_prefill_size", "number", "chunked_prefill_size", 64, 65536, 64),
                ("tp_size", "select", "tensor parallel", (1, 2, 4, 8), None, None),
                ("kv_cache_dtype", "select", "KV cache dtype", ("auto", "fp8_e5m2", "fp8_e4m3"), None, None),
                ("disable_cuda_graph", "checkbox", "no CUDA graphs", None, None, None),
                ("speculative_algorithm", "select", "speculative decoding",
                 ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"), None, None),
                ("speculative_draft_model_path", "text", "draft model (--speculative-draft-model-path)",
                 "none: the model's own MTP layers", None, None),
                ("speculative_num_steps", "number", "draft steps", 1, 16, 1),
                ("speculative_num_draft_tokens", "number", "draft tokens", 1, 64, 1))
    gguf_mixes = False  # sizes no llama.cpp quantization mix
    log_figures = LOG_FIGURES
    log_only_settings: tuple[str, ...] = ()
    log_version_basis = "the oldest release printing these line formats"

    def log_findings(self, observed: dict):
        return None

    def resolve_model(self, reference: str):
        return None  # the common sources (catalog, local, Hub) name SGLang's models

    def common_settings(self, *, context: int | None = None, gpus: int = 1) -> dict:
        """vLLM's names, which SGLang reads as its own (plan.ALIASES)."""
        return {"tensor_parallel_size": gpus, **({"max_model_len": context} if context else {})}

    @cached_property
    def releases(self) -> Releases:
        from ...units import format_version
        from . import releases

        return Releases(releases.NOTABLE_RELEASES, format_version(releases.OLDEST_SUPPORTED),
                        format_version(releases.NEWEST_KNOWN), releases.resolve_version, releases.rules,
                        releases.rule_at, releases.first_release, releases.is_modelled, releases.era)

    @cached_property
    def launch(self) -> LaunchLine:
        from . import launch

        return LaunchLine(launch.FLAGS, launch.parse_flag_value, launch.parse_launch_words, launch.LaunchLineError,
                          foreign=frozenset(launch.ALIASES),
                          program=("python", "-m", "sglang.launch_server", "--model-path", "_"))

    def is_launch_line(self, words) -> bool:
        from .launch import _entrypoint

        try:
            _entrypoint(list(words))
        except ValueError:
            return False
        return True

    def launch_line(self, model: str, settings: dict) -> str:
        from .advisor import launch_line

        return launch_line(model, settings)

    @cached_property
    def logs(self) -> LogFormats:
        return LogFormats(_lines, _observed, _is_sglang_log)

    @property
    def reading(self) -> ReadingLever:
        """`logs --nvidia-smi` without a log: the lever a reading is solved for (reading.py)"""
        from .reading import READING

        return READING

    @cached_property
    def simulation(self) -> PoolSimulation:
        """simulate's pool and scheduler: the token pool, radix cache and retract_decode (simulation.py)"""
        from . import simulation as s

        return PoolSimulation(s.pool, s.simulator, s.rule_table, s.lever, s.flags_for_bytes, grain=s.GRAIN,
                              words=s.words())

    @cached_property
    def levers(self) -> Levers:
        return Levers((), type(None), _NoFastPath, lambda: None, _flag_names, lambda *args: None, answers=_answers)

    @cached_property
    def scoring(self) -> CaseScoring:
        from ... import scoring as neutral
        from . import scoring

        return CaseScoring(scoring.score_case, scoring.FIGURES,
                           lambda section: neutral.format_engine_section(self.label, section), _observed)

    @cached_property
    def refusals(self) -> tuple[type[Exception], ...]:
        from .plan import StartupRefusal

        return (StartupRefusal,)

    @cached_property
    def settings_error(self) -> type[Exception]:
        from .plan import SettingsError

        return SettingsError

    def log_label(self, key: str) -> str | None:
        from .log_labels import label

        return label(key)

    def log_gpus(self, text: str) -> tuple[str, ...]:
        return ()  # SGLang's startup lines name no device (nvidia-smi quoted in the log may)

    def log_memory(self, observed: dict) -> dict:
        from .log_labels import memory

        return memory(observed)

    def log_settings(self, text: str) -> dict:
        """The settings a `server_args=ServerArgs(...)` dump shows (SGLang's names)."""
        from .log_parser import parse_server_args

        return parse_server_args(text)

    def log_version(self, text: str):
        """The oldest release whose line formats this log prints (None when no line tells)."""
        from .log_parser import infer_version

        return infer_version(text)

    def resolve_settings(self, user: dict, spec, gpu, version):
        from .plan import resolve_settings

        return resolve_settings(user, spec, gpu, version)

    def plan(self, spec, gpu, settings: dict, version, *, gguf_checkpoint=None):
        from .plan import plan

        if gguf_checkpoint is not None:
            from .plan import SettingsError

            raise SettingsError("GGUF checkpoints are not sized for SGLang yet")
        return plan(spec, gpu, settings, version)

    def kv_plan_for_budget(self, spec, gpu, settings: dict, version, kv_budget_bytes: int):
        """max_total_num_tokens for a given rest (bytes) as the pool sizes it (stage 0's cell under PP)."""
        from .pool import align_tokens, attention_tp, cell_size
        from .plan import first_stage_spec, resolve_settings

        s, r = resolve_settings(settings, spec, gpu, version)
        cell = cell_size(first_stage_spec(spec, s, r), attention_tp(s), s.kv_cache_dtype, r).bytes_per_token
        return align_tokens(kv_budget_bytes // cell, s.page_size, r, s.max_total_tokens)

    def rank_inventories(self, spec, gpu, settings: dict, version) -> list:
        from .plan import rank_inventories, resolve_settings

        s, r = resolve_settings(settings, spec, gpu, version)
        return rank_inventories(spec, gpu, s, r)

    def checkpoint_report(self, spec, gpu, settings: dict, version, checkpoint):
        from .plan import _vllm_layout, resolve_settings

        s, r = resolve_settings(settings, spec, gpu, version)
        vllm, layout = _vllm_layout(spec, r)
        return vllm.checkpoint_report(spec, gpu, {"tensor_parallel_size": s.tp_size,
                                                  "pipeline_parallel_size": s.pp_size}, layout, checkpoint)

    def machine_settings(self, free_bytes: tuple[int, ...]) -> dict:
        """Several devices: --tp over all of them (each rank reads its own free memory: Gpu.in_use_bytes)."""
        return {"tp_size": len(free_bytes)} if len(free_bytes) > 1 else {}

    def first_release_serving(self, architecture: str, version):
        from .releases import first_release_serving

        return first_release_serving(architecture, version)

    def speculative_settings(self, speculation) -> dict:
        """SGLang's flags: an MTP draft is NEXTN (the target's own layers), a separate draft STANDALONE; a chain
        of k steps proposes k + 1 tokens with top-k 1 (0.5.23 arg_groups/speculative_hook.py sets
        num_draft_tokens to num_steps + 1 when eagle_topk is 1); NGRAM's window is its draft tokens."""
        algorithm = {"eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "NEXTN", "ngram": "NGRAM",
                     "draft_model": "STANDALONE"}[speculation.method]
        if algorithm == "NGRAM":
            return {"speculative_algorithm": algorithm, "speculative_num_draft_tokens": speculation.tokens}
        out = {"speculative_algorithm": algorithm, "speculative_num_steps": speculation.tokens,
               "speculative_eagle_topk": 1, "speculative_num_draft_tokens": speculation.tokens + 1}
        if speculation.draft_model:
            out["speculative_draft_model_path"] = speculation.draft_model
        return out

    def unsized_reason(self, speculative_config, spec) -> str | None:
        # SGLang's draft comes from --speculative-algorithm and its flags (draft.py, pool.py), not a vLLM-style config
        return "SGLang takes --speculative-algorithm and its flags, not a speculative config" if speculative_config else None

    @cached_property
    def live_metrics(self):
        """Reads the running server's /metrics (metrics.py: names by release)."""
        from .metrics import read

        return read

    @cached_property
    def deployment(self):
        """How the engine runs as a server in a container (deploy.py: image, port, health, command)."""
        from .deploy import DEPLOYMENT

        return DEPLOYMENT

    def cuda_context_bytes(self) -> int:
        from .calibration import CUDA_CONTEXT

        return CUDA_CONTEXT.bytes


ENGINE = SGLangEngine()
