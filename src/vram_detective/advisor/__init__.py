"""The advisor: `whatif` (what every lever changes) and `fit` (which settings meet a target).

Both stand on the forward model (`vram_detective.api.explain`). `fit` sweeps thousands of settings
through `sweep.FastPath`, a vectorized form of the same plan that is checked against `explain` figure by
figure, and verifies its best candidates with `explain` itself.

Kept import-free so that `vram-detective --help` stays fast: import the submodules you need
(`sweep`, `search`, `levers`, `variants`, `launch_command`).
"""
