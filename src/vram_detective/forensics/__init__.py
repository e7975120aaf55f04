"""Log forensics: read a real engine log (and nvidia-smi output), rebuild what each GPU held, infer what
the log does not say, and reconcile it with the prediction (issue 6).

Each engine's log formats and their reader live in the engine (vLLM's: engines/vllm/logs/, reached as
`engine.logs.reader()`). Modules: `streaming` (bounded runs of a log of any length), `nvidia_smi` (default table,
--query-gpu CSV, -q / -q -x), `observed` (the observation as a Breakdown-shaped record), `infer`
(release, GPU, settings, candidate models), `reconcile` (observed vs predicted, nvidia-smi, what-ifs),
`command` (`vram-detective logs`). This package file stays import-free so the CLI starts fast.
"""
