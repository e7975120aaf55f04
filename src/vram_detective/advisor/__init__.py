"""The advisor: `whatif` (what every lever changes) and `fit` (which settings meet a target).

Engine-neutral here: the one dispatch (answers.py, the engine's own advisor through `Levers.answers`), the
command line (command.py), the catalog's checkpoint variants (variants.py) and the renderers (report.py). Each
engine's levers and search live with the engine (engines/<engine>/advisor): vLLM's vectorized sweep through
its FastPath, SGLang's loop over its plan, llama.cpp's layer and context solvers, Ollama's knobs.

Kept import-free so that `vram-detective --help` stays fast: import the submodules you need.
"""
