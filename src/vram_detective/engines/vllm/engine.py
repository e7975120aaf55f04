"""vLLM behind engines/base.py's interface: every part delegates to the vLLM modules beside this one
(vLLM's logs: logs/). Parts are built on first use, so importing this module is light."""
from __future__ import annotations

from functools import cached_property

from ..base import CaseScoring, LaunchLine, Levers, LogFormats, PoolSimulation, ReadingLever, Releases


def _is_vllm_log(text: str) -> bool:
    """A log is vLLM's when one of its release formats matches (logs/eras.py) or it names vLLM."""
    from .logs.eras import infer_version_from_log

    return infer_version_from_log(text) is not None or "vllm" in text.lower()


def _observed(text: str) -> dict:
    from .logs.reader import observed_from_log

    return observed_from_log(text)


def _reader():
    from .logs import reader

    return reader


def _analyse(*args) -> dict:
    from .logs.analysis import analyse

    return analyse(*args)


def _flag_names() -> dict[str, str]:
    from .launch import FLAGS

    return {flag.setting: flag.names[0] for flag in FLAGS}


def _path_switch(spec, gpu, version, settings: dict) -> str | None:
    """VLLM_USE_V1 when the requested V0/V1 path is not the release's default on this GPU."""
    from .releases import release
    from .settings import pick_engine

    wanted = settings.get("engine")
    if not wanted:
        return None
    default, _ = pick_engine(release(version, None), gpu, None)
    if default == wanted:
        return None
    return "VLLM_USE_V1=1" if wanted == "v1" else "VLLM_USE_V1=0"


def _answers():
    from .advisor import answers

    return answers


class VllmEngine:
    name = "vllm"
    label = "vLLM"
    # the levers the web page shows as controls: (setting, kind, label, min, max, step)
    controls = (("gpu_memory_utilization", "range", "GPU memory utilization", 0.05, 0.99, 0.01),
                ("max_model_len", "range", "context (max_model_len)", 512, 131072, 512),
                ("max_num_seqs", "range", "max_num_seqs", 1, 1024, 1),
                ("max_num_batched_tokens", "number", "max_num_batched_tokens", 16, 1048576, 16),
                ("tensor_parallel_size", "select", "tensor parallel", (1, 2, 4, 8), None, None),
                ("pipeline_parallel_size", "select", "pipeline parallel", (1, 2, 4), None, None),
                ("kv_cache_dtype", "select", "KV cache dtype", ("auto", "fp8", "fp8_e5m2"), None, None),
                ("enforce_eager", "checkbox", "eager (no CUDA graphs)", None, None, None),
                ("speculative_config", "text", "speculative decoding (--speculative-config)",
                 '{"method": "eagle3", "model": "...", "num_speculative_tokens": 3}', None, None))

    @property
    def reading(self) -> ReadingLever:
        """`logs --nvidia-smi` without a log: the lever a reading is solved for (reading.py)"""
        from .reading import READING

        return READING

    @property
    def releases(self) -> Releases:
        # built when asked (cheap): NEWEST_KNOWN / NOTABLE_RELEASES in releases.py are the one place a release
        # without new rules is added
        from ...units import format_version
        from . import releases

        return Releases(releases.NOTABLE_RELEASES, format_version(releases.OLDEST_SUPPORTED),
                        format_version(releases.NEWEST_KNOWN), releases.resolve_version, releases.release,
                        releases.rule_at, releases.first_release, releases.is_modelled, releases.era)

    @cached_property
    def launch(self) -> LaunchLine:
        from . import launch

        return LaunchLine(launch.FLAGS, launch.parse_flag_value, launch.parse_launch_line, launch.LaunchLineError,
                          program=("vllm", "serve", "_"), entrypoints=("serve", "llm"),
                          image_entrypoint=("vllm", "serve"))

    gguf_mixes = False  # sizes no llama.cpp quantization mix
    log_figures: tuple = ()  # vLLM's logs have their own reconciliation (logs/reconcile.py)
    log_only_settings: tuple[str, ...] = ()
    log_version_basis = "the oldest release printing these line formats"

    def log_findings(self, observed: dict):
        return None

    def log_label(self, key: str) -> str | None:
        from ...forensics.observed import LABELS

        return LABELS.get(key)

    def log_gpus(self, text: str) -> tuple[str, ...]:
        return ()  # found run by run by the reader's inference (logs/infer.py: printed totals, nvidia-smi)

    def log_memory(self, observed: dict) -> dict:
        if observed.get("weights_gib") is None and observed.get("kv_cache_gib") is None:
            return {}
        return {"weights_gib": observed.get("weights_gib") or 0, "kv_gib": observed.get("kv_cache_gib") or 0,
                "other_gib": observed.get("cuda_graph_gib") or 0, "total_gib": observed.get("total_gpu_memory_gib")}

    def log_settings(self, text: str) -> dict:
        return {}  # read run by run from the launch line and args dump by the log reader (engines/vllm/logs/)

    def log_version(self, text: str):
        return None  # read by the vLLM log reader's era tables (engines/vllm/logs/)

    def resolve_model(self, reference: str):
        return None  # the common sources (catalog, local, Hub) name vLLM's models

    def common_settings(self, *, context: int | None = None, gpus: int = 1) -> dict:
        return {"tensor_parallel_size": gpus, **({"max_model_len": context} if context else {})}

    def machine_settings(self, free_bytes: tuple[int, ...]) -> dict:
        """Free memory comes with the Gpu (Gpu.in_use_bytes); several devices: tensor parallel over them."""
        return self.common_settings(gpus=len(free_bytes)) if len(free_bytes) > 1 else {}

    def is_launch_line(self, words) -> bool:
        from .launch import is_launch_line

        return is_launch_line(words)

    def launch_line(self, model: str, settings: dict) -> str:
        """`vllm serve MODEL ...`; a V0/V1 path asked for is set by VLLM_USE_V1 in front."""
        from .advisor.launch_command import serve_command

        env = None
        if "engine" in settings:
            env = "VLLM_USE_V1=" + ("1" if settings["engine"] == "v1" else "0")
        return serve_command(model, settings, engine_env=env)

    @cached_property
    def logs(self) -> LogFormats:
        from .logs.lines import log_lines

        return LogFormats(log_lines, _observed, _is_vllm_log, _reader, _analyse)

    @cached_property
    def simulation(self) -> PoolSimulation:
        """simulate's pool and scheduler: V1's hybrid KV-cache manager and V0's block manager (simulation.py)"""
        from . import simulation as s

        return PoolSimulation(s.pool, s.simulator, s.rule_table, s.lever, s.flags_for_bytes, in_flight=s.in_flight)

    @cached_property
    def levers(self) -> Levers:
        from . import sweep

        # numpy_or_none read at call time: tests hide numpy by patching the sweep module
        return Levers(sweep.SWEPT, sweep.FastPath, sweep.FastPathUnsupported, lambda: sweep.numpy_or_none(),
                      _flag_names, _path_switch, advisor="sweep",
                      answers=_answers)

    @cached_property
    def scoring(self) -> CaseScoring:
        from . import scoring

        return CaseScoring(scoring.score_case, scoring.HEADLINE_FIGURES, scoring.format_section,
                           _observed, scoring.CONSISTENCY_FIGURES, detail_tables=True)

    @cached_property
    def refusals(self) -> tuple[type[Exception], ...]:
        from .kv_groups import KvLayoutRefusal, KvSpecRefusal
        from .quant_kernels import UnsupportedOnGpuError
        from .settings import StartupRefusal

        return (StartupRefusal, UnsupportedOnGpuError, KvLayoutRefusal, KvSpecRefusal)

    @cached_property
    def settings_error(self) -> type[Exception]:
        from .settings import SettingsError

        return SettingsError

    def resolve_settings(self, user: dict, spec, gpu, version):
        from .releases import release
        from .settings import resolve_settings

        return resolve_settings(user, spec, gpu, release, version)

    def plan(self, spec, gpu, settings: dict, version, *, gguf_checkpoint=None):
        from .plan import plan

        return plan(spec, gpu, settings, version, gguf_checkpoint=gguf_checkpoint)

    def kv_plan_for_budget(self, spec, gpu, settings: dict, version, kv_budget_bytes: int):
        from .kv_plan import kv_plan_for_budget

        return kv_plan_for_budget(spec, gpu, settings, version, kv_budget_bytes)

    def rank_inventories(self, spec, gpu, settings: dict, version, layer_counts: tuple[int, ...] = ()) -> list:
        """`layer_counts`: another engine's split of the layers over the pipeline stages (SGLang's own)."""
        from .weights_plan import rank_inventories

        return rank_inventories(spec, gpu, settings, version, layer_counts=layer_counts)

    def checkpoint_report(self, spec, gpu, settings: dict, version, checkpoint):
        from .weights_plan import checkpoint_report

        return checkpoint_report(spec, gpu, settings, version, checkpoint)

    def first_release_serving(self, architecture: str, version):
        from .releases import first_release_serving

        newer = first_release_serving(architecture, tuple(version))
        return None if newer is None else newer[0].version

    def speculative_settings(self, speculation) -> dict:
        """--speculative-config {"method", "model", "num_speculative_tokens"} (speculative.py reads it)."""
        config = {"method": speculation.method, "num_speculative_tokens": speculation.tokens}
        if speculation.draft_model:
            config["model"] = speculation.draft_model
        return {"speculative_config": config}

    def unsized_reason(self, speculative_config, spec) -> str | None:
        from .speculative import unsized_reason

        return unsized_reason(speculative_config, spec)

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
        from .profile import CUDA_CONTEXT

        return CUDA_CONTEXT


ENGINE = VllmEngine()
