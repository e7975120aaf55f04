"""Read a vLLM log of any era (0.2 on) line by line and pull out every memory figure it printed.

The input is streamed: a log of any size is read in 1 MiB chunks, one line at a time, and only the
figures are kept (never the text). Every line is cleaned first (ANSI colours, "\\r" progress bars,
"[repeated 7x across cluster]"), split where several log records were glued onto one line (Ray, copied
excerpts), and its worker prefix is read ("(VllmWorker TP1 pid=...)", "(RayWorkerWrapper pid=..., ip=...)",
"(EngineCore_DP0 pid=...)", "(Worker_TP0 pid=...)", none for the V0 driver) so that figures are kept per
rank. A log that holds several starts (a restart, two versions compared) is split into runs.

Figures carry SCHEMA.md's `observed` key names (shared/groundtruth/SCHEMA.md): sizes in GiB as printed
(vLLM's "GB" is GiB; the 0.3-era "MB" is MiB), counts as integers. Formats: design/vllm-memory.md §2.
"""
from __future__ import annotations

import re

from ....forensics.serving import ServingStats
from ....textlog import MAX_LINE_CHARS, LineReader, LogInputError
from .eras import (  # noqa: F401 - the era functions, read through the engine with the reader
    FormatMarkers, engine_from_markers, era_evidence, era_from_markers, era_ranges, infer_engine_from_log,
    infer_version_from_log, refine_wildcard_version,
)
from .patterns import (  # noqa: F401 - PATTERNS: the table, read with the reader
    _ALL_KEYWORDS, _ERROR_WORDS, _EXCEPTION_LINE, _GATE, _MATCHERS, _MATCHERS_OF, _N, PATTERNS, _float, _tokens,
)
from .records import (_NOISE, _clean, _config_settings, _python_dict_items, _record, _Record, _source_of,
                      _split_records)
from .runs import (  # noqa: F401 - the run types, read with the reader
    OBSERVED_KEYS, SETTING_KEYS, Figure, ParsedLog, Run, SettingEvidence, SourceInfo, _merge_into, _RunBuilder,
)


class LogParser:
    """Feed lines (str), then call result()."""

    def __init__(self) -> None:
        from ....forensics.nvidia_smi import LineScanner

        self._builder = _RunBuilder(LineScanner())
        self.lines_read = 0
        self.bytes_read = 0
        self.lines_matched = 0
        self.truncated_lines = 0
        self.markers = FormatMarkers()
        self._command: str | None = None  # a launch command continued with "\"

    def feed(self, raw: str) -> None:
        self.lines_read += 1
        if not raw and self._command is None:  # a blank line, cheaply: 100 MB of bare "\r" is 100 M of them
            return
        if len(raw) > MAX_LINE_CHARS:  # LineReader has cut these already; parse_text / parse_lines have not
            raw = raw[:MAX_LINE_CHARS]
            self.truncated_lines += 1
        self._builder.line_no = self.lines_read
        line = _clean(raw)
        if self._command is not None:
            if line[:1].isspace() or line.lstrip().startswith("-"):  # a continued command line
                self._command += " " + line.strip().rstrip("\\")
                if line.rstrip().endswith("\\"):
                    return
                line = ""
            command, self._command = self._command, None
            self._launch(command, SourceInfo("", "rank 0", "main", True))
            if not line:
                return
        if not line:
            return
        if "usage:" in line or "preempted by" in line or "#retracted" in line:
            self._serving(line)  # the periodic stats lines, which the filter below drops as noise
        for noise in _NOISE:
            if noise in line:
                return
        if _GATE.search(line) is None:
            return
        matched = False
        smi = self._builder.smi.feed(line)
        if smi:
            self._smi(smi)
            matched = True
        for piece in _split_records(line):
            record = _record(piece)
            self.markers.feed(record.text)
            self._builder.run.markers.feed(record.text)
            if self._handle(record):
                matched = True
        if matched:
            self.lines_matched += 1
            self._builder.run.lines_matched += 1
            if not self._builder.run.first_line:
                self._builder.run.first_line = self.lines_read
            self._builder.run.last_line = self.lines_read

    def _serving(self, line: str) -> None:
        run = self._builder.run
        if run.serving is not None:
            run.serving.feed(line, self.lines_read)
            return
        stats = ServingStats()
        if stats.feed(line, self.lines_read):
            run.serving = stats

    def _smi(self, found: list[dict]) -> None:
        run = self._builder.run
        for item in found:
            if item["type"] == "gpu":
                run.smi_gpus.append(dict(item, line=self.lines_read))
            elif item["type"] == "process":
                run.smi_processes.append(dict(item, line=self.lines_read))

    # --- one record ----------------------------------------------------------------------------------------

    def _handle(self, record: _Record) -> bool:
        message = record.message
        source = None
        builder = self._builder
        hit = False
        found = [word for word in _ALL_KEYWORDS if word in message]  # then only the patterns these admit
        if not found:
            candidates = ()
        elif len(found) == 1:
            candidates = _MATCHERS_OF[found[0]]
        else:
            candidates = sorted({index for word in found for index in _MATCHERS_OF[word]})
        for index in candidates:
            pattern, handler, _ = _MATCHERS[index]
            match = pattern.search(message)
            if match is None:
                continue
            if source is None:
                source = _source_of(record)
            if getattr(self, "_on_" + handler)(match, source, message, record) is not False:
                hit = True
        if not hit and record.level in ("ERROR", "CRITICAL") and _ERROR_WORDS.search(message):
            builder.run.failures.append((self.lines_read, message[:300]))
            hit = True
        elif ("Error" in message or "Exception" in message) and _EXCEPTION_LINE.match(message) \
                and not builder.run.failures:
            builder.run.failures.append((self.lines_read, message[:300]))
            hit = True
        if hit:
            if source is None:
                source = _source_of(record)
            info = builder.run.sources.get(source.rank_label + "|" + source.label)
            if info is None:
                builder.run.sources[source.rank_label + "|" + source.label] = source
            else:
                info.pids |= source.pids
                info.ips |= source.ips
        return hit

    def _fig(self, key, value, kind, priority, source, message) -> None:
        self._builder.figure(key, value, kind, priority, source, message)

    # weights
    def _on_weights_line(self, m, source, message, record):
        value = _float(m.group(1))
        if m.group(2) in ("MB", "MiB"):
            value = value / 1024
        self._builder._kind("weights line", source)
        self._fig("weights_gib", value, "weights line", 0, source, message)

    def _on_model_loading(self, m, source, message, record):
        self._builder._kind("weights line", source)
        self._fig("weights_gib", _float(m.group(1)), "weights line", 0, source, message)

    def _on_weights_summary(self, m, source, message, record):
        self._fig("weights_gib", _float(m.group(1)), "profiling summary", 1, source, message)

    def _on_profiling_results(self, m, source, message, record):
        body = m.group("body")
        values = dict((k, v) for k, v in re.findall(r"(?<!\w)(\w+)=" + _N, body))
        if not values:
            return False
        self._builder._kind("profiling summary", source)
        names = {"initial_memory_usage": "initial_memory_usage_gib", "peak_torch_memory": "peak_torch_memory_gib",
                 "memory_usage_post_profile": "memory_usage_post_profile_gib"}
        for name, value in values.items():
            if name == "non_torch_memory":
                self._fig("non_torch_gib", _float(value), "profiling summary", 0, source, message)
            elif name == "kv_cache_size":
                self._fig("kv_cache_gib", _float(value), "profiling summary", 0, source, message)
            elif name in names:
                self._fig(names[name], _float(value), "profiling summary", 0, source, message)
        return True  # total and utilization come from their own patterns

    def _on_total_gpu_memory(self, m, source, message, record):
        self._fig("total_gpu_memory_gib", _float(m.group(1)), "profiling summary", 0, source, message)

    def _on_utilization_printed(self, m, source, message, record):
        value = _float(m.group(1))
        if not 0 < value <= 1:
            return False
        self._builder.setting("gpu_memory_utilization", value, "profiling line", "printed")

    def _on_requested_v0(self, m, source, message, record):
        self._builder._kind("budget line", source)
        self._fig("requested_memory_gib", _float(m.group(1)), "budget line", 0, source, message)

    def _on_non_torch_summary(self, m, source, message, record):
        self._fig("non_torch_gib", _float(m.group(1)), "profiling summary", 0, source, message)

    def _on_activation_summary(self, m, source, message, record):
        self._fig("activation_peak_gib", _float(m.group(1)), "profiling summary", 0, source, message)

    def _on_kv_summary(self, m, source, message, record):
        self._builder._kind("profiling summary", source)
        self._fig("kv_cache_gib", _float(m.group(1)), "profiling summary", 0, source, message)

    def _on_profiling_takes(self, m, source, message, record):
        self._fig("profiling_seconds", _float(m.group(1)), "profiling summary", 0, source, message)

    def _on_debug_non_kv(self, m, source, message, record):
        self._fig("non_kv_cache_gib", _float(m.group(1)), "debug profile", 0, source, message)

    def _on_debug_activation(self, m, source, message, record):
        self._fig("activation_peak_gib", _float(m.group(1)), "debug profile", 3, source, message)

    def _on_debug_non_torch(self, m, source, message, record):
        self._fig("non_torch_gib", _float(m.group(1)), "debug profile", 3, source, message)

    def _on_debug_consumed(self, m, source, message, record):
        self._fig("consumed_gib", _float(m.group(1)), "debug profile", 1, source, message)

    def _on_debug_weights(self, m, source, message, record):
        self._fig("weights_gib", _float(m.group(1)), "debug profile", 3, source, message)

    def _on_debug_requested(self, m, source, message, record):
        self._fig("free_memory_on_startup_gib", _float(m.group(1)), "debug profile", 1, source, message)
        self._builder.setting("gpu_memory_utilization", _float(m.group(2)), "debug profile line", "printed")
        self._fig("requested_memory_gib", _float(m.group(3)), "debug profile", 2, source, message)

    def _on_kv_memory_bytes(self, m, source, message, record):
        self._fig("free_memory_on_startup_gib", _float(m.group(1)), "available KV line", 1, source, message)
        self._fig("kv_cache_gib", _float(m.group(2)), "available KV line", 1, source, message)
        self._builder.setting("kv_cache_memory_bytes", int(round(_float(m.group(2)) * 2**30)), "KV reservation line",
                              "printed")

    def _on_available_kv(self, m, source, message, record):
        self._builder._kind("available KV line", source)
        self._fig("kv_cache_gib", _float(m.group(1)), "available KV line", 0, source, message)

    def _on_free_on_startup(self, m, source, message, record):
        rest = m.group("rest")
        self._fig("free_memory_on_startup_gib", _float(m.group(1)), "startup suggestion", 0, source, message)
        self._fig("total_gpu_memory_gib", _float(m.group(2)), "startup suggestion", 1, source, message)
        failed = re.search(r"is less than (?:desired GPU memory utilization|the engine's budget.*?) \(" + _N + ", " + _N
                           + r" GiB\)", rest)
        if failed:
            self._builder.setting("gpu_memory_utilization", _float(failed.group(1)), "startup check", "printed")
            self._fig("requested_memory_gib", _float(failed.group(2)), "startup check", 1, source, message)
            self._builder.run.failures.append((self.lines_read, message[:300]))
        else:
            self._builder._kind("startup suggestion", source)

    def _on_desired_utilization(self, m, source, message, record):
        self._builder.setting("gpu_memory_utilization", _float(m.group(1)), "startup suggestion line", "printed")
        self._fig("requested_memory_gib", _float(m.group(2)), "startup suggestion", 1, source, message)

    def _on_suggest_weights(self, m, source, message, record):
        self._fig("weights_gib", _float(m.group(1)), "startup suggestion", 2, source, message)

    def _on_suggest_consumed(self, m, source, message, record):
        self._fig("consumed_gib", _float(m.group(1)), "startup suggestion", 0, source, message)

    def _on_suggest_activation(self, m, source, message, record):
        self._fig("activation_peak_gib", _float(m.group(1)), "startup suggestion", 1, source, message)

    def _on_suggest_non_torch(self, m, source, message, record):
        self._fig("non_torch_gib", _float(m.group(1)), "startup suggestion", 1, source, message)

    def _on_suggest_graphs(self, m, source, message, record):
        self._fig("cuda_graph_gib", _float(m.group(1)), "startup suggestion", 2, source, message)

    def _on_kv_in_use(self, m, source, message, record):
        value = _float(m.group(1))
        if m.group(2) == "bytes":
            value = value / 2**30
        self._fig("kv_cache_gib", value, "startup suggestion", 1, source, message)

    def _on_suggest_fit(self, m, source, message, record):
        self._fig("suggested_kv_cache_memory_fit_bytes", int(m.group(1)), "startup suggestion", 0, source, message)

    def _on_suggest_full(self, m, source, message, record):
        self._fig("suggested_kv_cache_memory_full_bytes", int(m.group(1)), "startup suggestion", 0, source, message)

    # blocks, tokens, concurrency
    def _on_blocks(self, m, source, message, record):
        self._builder._kind("blocks line", source)
        self._fig("num_gpu_blocks", int(m.group(1)), "blocks line", 0, source, message)
        if m.group(2) is not None:
            self._fig("num_cpu_blocks", int(m.group(2)), "blocks line", 0, source, message)

    def _on_blocks_override(self, m, source, message, record):
        self._builder.setting("num_gpu_blocks_override", int(m.group(2)), "override line", "printed")

    def _on_kv_tokens(self, m, source, message, record):
        self._fig("kv_cache_tokens", _tokens(m.group(1)), "KV size line", 0, source, message)

    def _on_concurrency(self, m, source, message, record):
        tokens = _tokens(m.group(1))
        self._fig("max_concurrency_tokens", tokens, "concurrency line", 0, source, message)
        self._fig("max_concurrency", _float(m.group(2)), "concurrency line", 0, source, message)
        self._builder.setting("max_model_len", tokens, "concurrency line", "printed")

    # graphs
    def _on_graph_capture(self, m, source, message, record):
        if m.group(2) is not None:
            self._fig("cuda_graph_gib", _float(m.group(2)), "graph capture line", 0, source, message)
        self._builder.run.successes.append((self.lines_read, "CUDA graphs captured"))

    def _on_graph_pool(self, m, source, message, record):
        self._fig("cuda_graph_gib", _float(m.group(1)), "graph pool line", 1, source, message)
        self._fig("cuda_graph_estimate_gib", _float(m.group(2)), "graph pool line", 1, source, message)

    def _on_graph_estimate(self, m, source, message, record):
        self._fig("cuda_graph_estimate_gib", _float(m.group(1)), "graph estimate line", 0, source, message)

    def _on_graph_hint(self, m, source, message, record):
        self._builder.setting("gpu_memory_utilization", _float(m.group(1)), "CUDA-graph profiling hint", "printed")
        self._fig("equivalent_utilization_without_graph_profiling", _float(m.group(2)), "graph hint", 0, source,
                  message)

    def _on_graph_hint_old(self, m, source, message, record):
        self._builder.setting("gpu_memory_utilization", _float(m.group(1)), "CUDA-graph profiling hint", "printed")

    def _on_graph_hint_018(self, m, source, message, record):
        self._builder.version("0.18", "CUDA-graph hint 'In v0.19, ... will be enabled' (0.18.x)")

    def _on_graph_hint_021(self, m, source, message, record):
        self._builder.version("0.21", "CUDA-graph hint 'default since v0.21.0' (0.21+)")

    # errors
    def _on_no_kv_error(self, m, source, message, record):
        self._builder.run.failures.append((self.lines_read, message[:300]))

    def _on_v0_fit_error(self, m, source, message, record):
        self._builder.setting("max_model_len", int(m.group(1)), "KV-capacity error", "printed")
        self._fig("kv_cache_tokens", int(m.group(2)), "KV-capacity error", 1, source, message)
        self._builder.run.failures.append((self.lines_read, message[:300]))

    def _on_v1_fit_error(self, m, source, message, record):
        self._builder.setting("max_model_len", int(m.group(1)), "KV-capacity error", "printed")
        self._fig("kv_needed_gib", _float(m.group(2)), "KV-capacity error", 0, source, message)
        self._fig("kv_cache_gib", _float(m.group(4)), "KV-capacity error", 2, source, message)
        self._builder.run.failures.append((self.lines_read, message[:300]))

    def _on_estimated_max_len(self, m, source, message, record):
        self._fig("estimated_max_model_len", int(m.group(1)), "KV-capacity error", 0, source, message)

    def _on_oom(self, m, source, message, record):
        self._builder.run.failures.append((self.lines_read, message[:300]))

    def _on_oom_allocate(self, m, source, message, record):
        value = _float(m.group(1)) / (1024 if m.group(2) == "MiB" else 1)
        self._fig("oom_tried_to_allocate_gib", value, "CUDA OOM", 0, source, message)

    def _on_failure(self, m, source, message, record):
        self._builder.run.failures.append((self.lines_read, message[:300]))

    def _on_success(self, m, source, message, record):
        self._builder.run.successes.append((self.lines_read, m.group(0)))

    # settings and identity
    def _on_config_line(self, m, source, message, record):
        builder = self._builder
        builder._kind("config line", source)
        if m.group("version"):
            builder.version(m.group("version"), "config line")
        body = m.group("body") or ""
        model = re.search(r"(?:^|[\s,(])model='([^']*)'", body)
        if model:
            builder.model(model.group(1), "config line")
        for name, value in _config_settings(body).items():
            builder.setting(name, value, "config line", "printed")
        if "cudagraph_mode': <CUDAGraphMode.NONE" in body or '"cudagraph_mode":0' in body:
            builder.run.notes.append((self.lines_read, "CUDA graphs off (cudagraph_mode NONE)"))
        engine = re.search(r"a (V[01]) LLM engine", message)
        if engine:
            builder.run.engine_hint = engine.group(1).lower()

    def _on_non_default_args(self, m, source, message, record):
        builder = self._builder
        builder._kind("non-default args", source)
        args = _python_dict_items(m.group("body"))
        if "model_tag" in args:
            builder.setting("entrypoint", "serve", "non-default args (model_tag: the `vllm serve` CLI)", "given")
        model = args.get("model_tag") or args.get("model")
        if isinstance(model, str):
            builder.model(model, "non-default args")
        for name, value in args.items():
            if name in SETTING_KEYS:
                if name == "speculative_config" and not value:
                    continue
                builder.setting(name, value, "non-default args", "given")

    def _on_server_banner(self, m, source, message, record):
        self._builder._kind("version", source)
        self._builder.version(m.group("version"), "server banner")
        if m.group("model"):
            self._builder.model(m.group("model"), "server banner")
        if "API server" in m.group(0) or source.role == "api":
            self._builder.setting("entrypoint", "serve", "API server banner", "implied")

    def _on_logo_version(self, m, source, message, record):
        self._builder._kind("version", source)
        self._builder.version(m.group("version"), "version banner")
        if m.groupdict().get("model"):
            self._builder.model(m.group("model"), "version banner")
        self._builder.setting("entrypoint", "serve", "API server banner", "implied")

    def _on_logo_model(self, m, source, message, record):
        self._builder.model(m.group("model"), "version banner")

    def _on_stated_version(self, m, source, message, record):
        if "server version" in message or re.search(r"█|^version", message):
            return False
        self._builder._kind("version", source)
        self._builder.version(m.group("version"), "stated in text")

    def _on_docker_version(self, m, source, message, record):
        self._builder.version(m.group("version"), "docker image tag")

    def _on_wheel_version(self, m, source, message, record):
        self._builder.version(m.group("version"), "wheel name")

    def _on_starting_model(self, m, source, message, record):
        self._builder.model(m.group("model"), "load line")

    def _on_max_model_len_line(self, m, source, message, record):
        self._builder.setting("max_model_len", int(m.group(1)), "'Using max model len' line", "printed")

    def _on_chunked_prefill(self, m, source, message, record):
        self._builder.setting("max_num_batched_tokens", int(m.group(1)), "chunked-prefill line", "printed")
        self._builder.setting("enable_chunked_prefill", True, "chunked-prefill line", "printed")

    def _on_block_size_line(self, m, source, message, record):
        self._builder.setting("block_size", int(m.group(1)), "block-size line", "printed")

    def _on_device_name(self, m, source, message, record):
        self._builder.run.gpu_names.append((m.group(1).replace("_", " "), "fused-MoE config file name", self.lines_read))

    def _on_reader_ranks(self, m, source, message, record):
        ranks = [int(x) for x in re.findall(r"\d+", m.group(1)) if len(x) <= 6]
        self._builder.run.world_size = max(ranks) + 1 if ranks else None

    def _on_gpu_type(self, m, source, message, record):
        self._builder.run.gpu_names.append((m.group(1), "'GPU type' line", self.lines_read))

    def _on_lora_on(self, m, source, message, record):
        self._builder.setting("enable_lora", True, "LoRA line", "printed")

    def _on_max_loras(self, m, source, message, record):
        self._builder.setting("max_loras", int(m.group(1)), "LoRA config", "printed")

    def _on_max_lora_rank(self, m, source, message, record):
        self._builder.setting("max_lora_rank", int(m.group(1)), "LoRA config", "printed")

    def _on_speculative_on(self, m, source, message, record):
        self._builder.run.notes.append((self.lines_read, "speculative decoding (a draft model / MTP head is loaded)"))

    def _on_encoder_cache(self, m, source, message, record):
        self._builder.run.notes.append((self.lines_read, f"multimodal encoder cache budget {m.group(1)} tokens"))

    def _on_padding_layers(self, m, source, message, record):
        self._builder.run.notes.append((self.lines_read, f"hybrid KV grouping ({m.group(1)} padding layers)"))

    def _on_backend(self, m, source, message, record):
        name = m.group(1) or m.group(2)
        if name and name not in ("default",):
            self._builder.run.notes.append((self.lines_read, f"attention backend {name}"))
            return True
        return False

    def _on_fp8_kv(self, m, source, message, record):
        self._builder.run.notes.append((self.lines_read, "FP8 KV cache"))

    def _on_launch_command(self, m, source, message, record):
        text = m.group(0).split("`")[0].strip()
        if text.endswith("\\"):
            self._command = text.rstrip("\\")
            return True
        return self._launch(text, source)

    def _launch(self, text: str, source: SourceInfo) -> bool:
        import shlex

        from ..launch import LaunchLineError, parse_launch_line

        start = re.search(r"vllm serve|python3?\s+-m\s+vllm|-m\s+vllm", text)
        text = text[start.start():] if start else text
        if text.startswith("-m"):
            text = "python " + text
        try:
            words = shlex.split(text)
        except ValueError:
            words = text.split()
        for stop in ("&", "&&", "|", ";", ">", "2>&1", "#"):
            if stop in words:
                words = words[:words.index(stop)]
        try:
            line = parse_launch_line(words)
        except (LaunchLineError, ValueError):
            return False
        self._builder._kind("launch command", source)
        if line.model:
            self._builder.model(line.model, "launch command")
        for name, value in line.settings.items():
            self._builder.setting(name, value, "launch command", "launch command")
        if "--enable-prefix-caching" in words:
            self._builder.setting("enable_prefix_caching", True, "launch command", "launch command")
        if "--no-enable-prefix-caching" in words:
            self._builder.setting("enable_prefix_caching", False, "launch command", "launch command")
        entry = "serve" if ("serve" in words[:3] or any("api_server" in w for w in words[:4])) else None
        if entry:
            self._builder.setting("entrypoint", entry, "launch command", "launch command")
        return True

    def finish(self) -> ParsedLog:
        if self._command is not None:
            command, self._command = self._command, None
            self._launch(command, SourceInfo("", "rank 0", "main", True))
        runs = [run for run in self._builder.runs if run.lines_matched or run.figures or run.settings]
        if not runs:
            runs = [self._builder.runs[0]]
        # identity lines after the last figures (an excerpt quoted out of order) belong to the run before
        while len(runs) > 1 and not runs[-1].has_figures() and not runs[-1].failures:
            _merge_into(runs[-2], runs.pop())
        for index, run in enumerate(runs):
            run.index = index
        return ParsedLog(runs, self.lines_read, self.bytes_read, self.lines_matched, self.markers, self.truncated_lines)


def parse_lines(lines) -> ParsedLog:
    parser = LogParser()
    for line in lines:
        parser.feed(line)
    return parser.finish()


def parse_text(text: str) -> ParsedLog:
    return parse_lines((text or "").splitlines())


def parse_stream(stream, name: str = "input", parser: "LogParser | None" = None) -> ParsedLog:
    """Parse a binary stream; raises LogInputError for binary, empty or non-vLLM input. `parser`: a LogParser
    (or a subclass such as streaming.BoundedLogParser) to feed instead of a new one."""
    reader = LineReader(stream, name, collapse_blank=True)
    parser = parser if parser is not None else LogParser()
    blank = True
    feed = parser.feed
    for line in reader:
        if reader.blank_skipped:  # blank lines before this one, read in one step: they count, nothing else
            parser.lines_read += reader.blank_skipped
            reader.blank_skipped = 0
        if blank and line and line.strip():
            blank = False
        feed(line)
    parser.lines_read += reader.blank_skipped
    parsed = parser.finish()
    parsed.bytes_read = reader.bytes_read
    parsed.truncated_lines = reader.truncated
    if blank:
        raise LogInputError(f"{name} is empty")
    if parser.lines_matched == 0:
        raise LogInputError(f"{name} has no vLLM memory lines ({parser.lines_read} lines read; expected lines such as "
                            "'Loading model weights took ...', '# GPU blocks: ...' or 'Available KV cache memory: ...')")
    return parsed


def parse_file(path: str) -> ParsedLog:
    with open(path, "rb") as stream:
        return parse_stream(stream, path)


def observed_from_log(text: str) -> dict:
    """SCHEMA `observed` figures of the first run of a log text (what the scorer's --from-logs uses)."""
    return parse_text(text).first.observed()
