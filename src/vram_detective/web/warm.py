"""Imported by the web server's fork server (workers.py), once: the modules the worker processes run, imported,
and one catalog explain and fit computed (the fit imports the advisor's sweep), so that every worker forked from
it (at start-up, or replacing one that was killed) starts warm instead of paying about half a second of imports
and cache fills on its first request."""
from __future__ import annotations

from . import app, service
from ..forensics import command  # noqa: F401 - imported for the workers
from ..simulate import command as simulate_command  # noqa: F401

try:
    service.warm_up()
    app.answer("fit", {"model": service.catalog_models()[0], "gpu": "H100", "context": "4k"}, service.Policy())
except Exception:  # noqa: BLE001 - a warm-up that fails leaves the workers cold, never the server down
    pass
