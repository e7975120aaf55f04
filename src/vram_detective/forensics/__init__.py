"""Log forensics: read a real vLLM log (and nvidia-smi output), rebuild what each GPU held, infer what
the log does not say, and reconcile it with the prediction (issue 6).

Modules: `parser` (vLLM logs of every era, streamed line by line), `nvidia_smi` (default table,
--query-gpu CSV, -q / -q -x), `observed` (the observation as a Breakdown-shaped record), `infer`
(release, GPU, settings, candidate models), `reconcile` (observed vs predicted, nvidia-smi, what-ifs),
`command` (`vram-detective logs`). This package file stays import-free so the CLI starts fast.
"""
