"""llama.cpp behind engines/base.py's interface (llama-server, llama-cli, llama-cpp-python). Releases are
build numbers ("b5274"); the plan is per device (VRAM per GPU, host RAM) from plan.py."""
from __future__ import annotations

from functools import cached_property

from ..base import CaseScoring, LaunchLine, Levers, LogFormats, PoolSimulation, ReadingLever, Releases


def _is_gguf_path(reference: str) -> bool:
    """A .gguf file (or a split's first part) is llama.cpp's format: it means this engine unless told otherwise."""
    return reference.lower().endswith(".gguf")


class FastPathUnsupported(Exception):
    """llama.cpp has no vectorized sweep: the advisor evaluates each point with plan()."""


class NoFastPath:
    def __init__(self, *args, **kwargs):
        raise FastPathUnsupported("llama.cpp points are planned one by one (engines/llamacpp/fit.py solves its levers)")


# the settings whatif / fit vary, and their llama-server flags
LEVERS = {"n_gpu_layers": "-ngl", "n_ctx": "-c", "n_parallel": "-np", "type_k": "-ctk", "type_v": "-ctv",
          "flash_attn": "-fa", "n_ubatch": "-ub", "n_cpu_moe": "--n-cpu-moe", "gguf_type": "(file: another quant)"}


def _flag_names() -> dict[str, str]:
    from .launch import FLAGS

    names = {flag.setting: flag.names[0] for flag in FLAGS}
    names.update({k: v for k, v in LEVERS.items() if not v.startswith("(")})
    return names


def is_llamacpp_log(text: str) -> bool:
    """llama.cpp's loader and context lines in any era (load_tensors, llama_kv_cache, llama_context...); an
    Ollama server log carries them too and is Ollama's."""
    from ..ollama.log_parser import is_ollama_log

    markers = ("load_tensors:", "llama_kv_cache", "llama_new_context_with_model", "llama_context:",
               "llama_model_loader:", "print_info:", "llm_load_print_meta", "ggml_cuda_init:",
               "common_memory_breakdown_print:", "common_params_fit")
    return any(marker in text for marker in markers) and not is_ollama_log(text)


# the figures `logs` sets against the prediction: (observed key, label, read from the Breakdown); a figure the
# prediction lacks (a device it does not use) is left out
_BUFFERS = tuple(f"{device}_{kind}_buffer_mib" for kind in ("model", "kv", "compute")
                 for device in ("cpu_mapped", "cpu_repack", "cpu", "cuda_host") + tuple(f"cuda{i}" for i in range(8)))
LOG_FIGURES = tuple((key, key.removesuffix("_mib").replace("_", " ") + (" (MiB)" if key.endswith("_mib") else ""),
                     lambda b, key=key: b.figure(key))
                    for key in ("offloaded_layers", "total_layers") + _BUFFERS
                    + ("cuda_host_output_buffer_mib", "cpu_output_buffer_mib", "kv_size_mib", "k_mib", "v_mib",
                       "kv_cells")) + (
    ("nvidia_smi_used_mib", "nvidia-smi used (MiB)", lambda b: b.nvidia_smi_used_mib),)


def _answers():
    from . import advisor

    return advisor


class LlamaCppEngine:
    name = "llamacpp"
    label = "llama.cpp"
    # the levers the web page shows as controls: (setting, kind, label, min, max, step)
    controls = (("n_ctx", "range", "context (-c)", 512, 131072, 512),
                ("n_parallel", "range", "parallel slots (-np)", 1, 64, 1),
                ("n_gpu_layers", "number", "GPU layers (-ngl)", 0, 999, 1),
                ("type_k", "select", "K cache type", ("f16", "q8_0", "q4_0"), None, None),
                ("type_v", "select", "V cache type", ("f16", "q8_0", "q4_0"), None, None),
                ("flash_attn", "select", "flash attention", ("auto", "on", "off"), None, None),
                ("tensor_split", "select", "layer split over GPUs (-ts)", ("1,1", "1,1,1", "1,1,1,1", "3,1"), None, None))

    @cached_property
    def releases(self) -> Releases:
        from . import releases as r

        return Releases(r.KNOWN_BUILDS, f"b{r.OLDEST_BUILD}", f"b{r.NEWEST_BUILD}", r.resolve_build, r.rules_at,
                        r.rule_at, r.first_release, r.is_modelled, r.era, name=lambda version: f"b{version[0]}")

    @cached_property
    def launch(self) -> LaunchLine:
        from . import launch

        return LaunchLine(launch.FLAGS, launch.parse_flag_value, launch.parse_launch_line, launch.LaunchLineError,
                          claims_model=_is_gguf_path, program=("llama-server", "-m", "_"))

    def is_launch_line(self, words) -> bool:
        from .launch import is_launch_line

        return is_launch_line(words)

    def launch_line(self, model: str, settings: dict) -> str:
        from .launch import FLAGS, server_line

        return server_line(FLAGS, model, settings)

    @cached_property
    def logs(self) -> LogFormats:
        from .log_lines import log_lines
        from .log_parser import parse

        return LogFormats(log_lines, parse, is_llamacpp_log)

    log_figures = LOG_FIGURES
    gguf_mixes = True  # sizes a model at a llama.cpp quantization mix without the file (--gguf-type)
    log_only_settings = ("gguf_type", "device_free_mib", "gguf_order")
    log_version_basis = "printed by the log (build: N)"

    def log_label(self, key: str) -> str | None:
        from .log_labels import label

        return label(key)

    def log_gpus(self, text: str) -> tuple[str, ...]:
        from .log_labels import gpus

        return gpus(text)

    def log_memory(self, observed: dict) -> dict:
        from .log_labels import memory

        return memory(observed)

    def log_settings(self, text: str) -> dict:
        from .log_parser import log_settings

        return log_settings(text)

    def log_version(self, text: str):
        from .log_parser import infer_build

        build = infer_build(text)
        return None if build is None else (build,)

    def log_findings(self, observed: dict):
        return None

    @property
    def reading(self) -> ReadingLever:
        """`logs --nvidia-smi` without a log: the lever a reading is solved for (reading.py)"""
        from .reading import READING

        return READING

    @cached_property
    def simulation(self) -> PoolSimulation:
        """simulate's pool and scheduler: the server's slots, context shift, no preemption (simulation.py)"""
        from . import simulation as s

        return PoolSimulation(s.pool, s.simulator, s.rule_table, s.lever, s.flags_for_bytes, bounds_requests=False,
                              words=s.WORDS)

    @cached_property
    def levers(self) -> Levers:
        return Levers(tuple(LEVERS), NoFastPath, FastPathUnsupported, lambda: None, _flag_names,
                      lambda spec, gpu, version, settings: None, advisor="gguf", answers=_answers)

    @cached_property
    def scoring(self) -> CaseScoring:
        from ... import scoring as neutral
        from . import scoring

        # observed_from_log None: a case's `observed` holds the per-device buffers its `log` excerpt may not
        return CaseScoring(scoring.score_case, scoring.FIGURES,
                           lambda section: neutral.format_engine_section(self.label, section))

    @cached_property
    def refusals(self) -> tuple[type[Exception], ...]:
        from .settings import StartupRefusal

        return (StartupRefusal,)

    @cached_property
    def settings_error(self) -> type[Exception]:
        from .settings import SettingsError

        return SettingsError

    def resolve_settings(self, user: dict, spec, gpu, version):
        from .releases import rules_at
        from .settings import resolve

        return resolve(user, version[0]), rules_at(version)

    def layout(self, spec, gpu, settings: dict, version, *, gguf_checkpoint=None):
        """The pure per-device numbers (plan.Layout)."""
        from .plan import layout
        from .settings import resolve

        return layout(spec, resolve(settings, version[0]), gguf_checkpoint)

    def plan(self, spec, gpu, settings: dict, version, *, gguf_checkpoint=None):
        from ...breakdown import Setting
        from .report import to_breakdown

        lay = self.layout(spec, gpu, settings, version, gguf_checkpoint=gguf_checkpoint)
        shown = (("n_gpu_layers", lay.offloaded), ("n_ctx", lay.n_ctx), ("n_parallel", lay.settings.n_parallel),
                 ("type_k", lay.settings.type_k), ("type_v", lay.settings.type_v),
                 ("flash_attn", "on" if lay.flash_attn else "off"), ("n_ubatch", lay.n_ubatch),
                 ("mmap", lay.settings.mmap)) + ((("gguf_type", lay.settings.gguf_type),) if gguf_checkpoint is None else ())
        rows = tuple(Setting(k, v, k in settings) for k, v in shown)
        return to_breakdown(spec, gpu, lay, f"b{version[0]}", self.label, self.name, settings=rows)

    def kv_plan_for_budget(self, spec, gpu, settings: dict, version, kv_budget_bytes: int):
        """The largest context whose KV fits `kv_budget_bytes` (fit.py)."""
        from .fit import largest_context_for_kv

        return largest_context_for_kv(spec, settings, version[0], kv_budget_bytes)

    def rank_inventories(self, spec, gpu, settings: dict, version) -> list:
        from .inventory import inventory
        from .plan import model_tensors
        from .settings import resolve

        tensors, _ = model_tensors(spec, resolve(settings, version[0]))
        return [(0, inventory(tensors))]

    def checkpoint_report(self, spec, gpu, settings: dict, version, checkpoint):
        """The GGUF header's tensors beside the model buffers they land in (None for a non-GGUF checkpoint,
        which llama.cpp does not load)."""
        from .report import GgufReport

        if checkpoint.format != "gguf":
            return None
        return GgufReport(checkpoint, self.layout(spec, gpu, settings, version, gguf_checkpoint=checkpoint))

    def command_line(self, settings: dict, version, model: str = "model.gguf") -> str:
        """The exact llama-server line for these settings (fit.command; the build's defaults left out)."""
        from .fit import command
        from .settings import resolve

        return command(resolve(settings, version[0]), model)

    def _budgets(self, gpu, settings: dict, ceiling: int | None) -> dict[str, int]:
        count = int(settings.get("num_gpus") or len(settings.get("tensor_split") or ()) or 1)
        # a ceiling above the card is the card (fit --max-gpu-memory 20GiB on an 11 GiB card)
        budget = min(ceiling, gpu.cuda_total_bytes) if ceiling else gpu.cuda_total_bytes
        return {f"CUDA{i}": budget for i in range(count)}

    def fit_layers(self, spec, gpu, settings: dict, version, *, n_ctx: int, model: str = "model.gguf",
                   gguf_checkpoint=None, ceiling: int | None = None):
        """The most layers on the GPU(s) at context n_ctx (fit.most_gpu_layers), within `ceiling` per GPU."""
        from .fit import most_gpu_layers

        return most_gpu_layers(spec, settings, version[0], self._budgets(gpu, settings, ceiling), n_ctx, model,
                               gguf_checkpoint)

    def fit_context(self, spec, gpu, settings: dict, version, *, model: str = "model.gguf", gguf_checkpoint=None,
                    ceiling: int | None = None):
        """The largest context with every layer on the GPU(s) (fit.largest_context)."""
        from .fit import largest_context

        return largest_context(spec, settings, version[0], self._budgets(gpu, settings, ceiling), model,
                               gguf_checkpoint)

    def resolve_model(self, reference: str):
        return None  # a .gguf path, a Hub GGUF repo or the catalog: the common sources

    def common_settings(self, *, context: int | None = None, gpus: int = 1) -> dict:
        """The common knobs in llama.cpp's names: -c, and the GPUs the layers are split over (-sm layer)."""
        return {**({"n_ctx": context} if context else {}), **({"num_gpus": gpus} if gpus > 1 else {})}

    def machine_settings(self, free_bytes: tuple[int, ...]) -> dict:
        """Several devices: -ts as llama.cpp's default split (each device's free memory, llama-model.cpp
        load_tensors when no split is given); one device: nothing to set."""
        return {"tensor_split": tuple(free // (1 << 20) for free in free_bytes)} if len(free_bytes) > 1 else {}

    def first_release_serving(self, architecture: str, version):
        return None  # architectures by build are not tabled yet: every modelled build is taken to serve it

    def speculative_settings(self, speculation) -> dict:
        from ...errors import NotOffered

        raise NotOffered("llama.cpp's draft model (-md) and its own context are not sized yet")

    def unsized_reason(self, speculative_config, spec) -> str | None:
        return "llama.cpp draft models are not sized yet" if speculative_config else None

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
        from .calibration import CUDA_CONTEXT_BYTES

        return CUDA_CONTEXT_BYTES


ENGINE = LlamaCppEngine()
