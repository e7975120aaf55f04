"""vLLM's advisor: `whatif` (every lever through explain, levers.py) and `fit` (the vectorized sweep over vLLM's
settings and the catalog's checkpoints, search.py), with the exact `vllm serve` / `LLM(...)` line
(launch_command.py). Reached through the engine interface (`Levers.answers` -> answers.py)."""
