"""Deployment files (compose, Kubernetes, Helm values, the command) from a prediction (`--emit`)."""
from __future__ import annotations

# what --emit prints (files.py lays each out); here so that a command's parser offers --emit without loading them
KINDS = ("compose", "k8s", "helm-values", "command")


def add_emit_argument(parser) -> None:
    parser.add_argument("--emit", choices=KINDS, default=None, metavar="{" + ",".join(KINDS) + "}",
                        help="print a deployment of the answer instead: a docker-compose service, a Kubernetes "
                             "Deployment + Service, values for the engine's common Helm chart, or the command line")


def deployment(model: str, gpu, kind: str = "k8s", *, engine: str | None = None, engine_version: str | None = None,
               **settings) -> str:
    """The library's --emit: the file (YAML, or the command line) that serves `model` on `gpu` with these settings
    (the engine's own names), for the release the prediction uses. ValueError when the engine would refuse to start
    or has no such file (SGLang and llama.cpp have no common Helm chart)."""
    from .. import api
    from ..engines import get_engine
    from .command import render
    from .files import Server

    if kind not in KINDS:
        raise ValueError(f"unknown deployment {kind!r} (known: {', '.join(KINDS)})")
    engine = get_engine(engine).name  # None: the default engine
    breakdown = api.explain(model, gpu, engine=engine, engine_version=engine_version, **settings)
    if breakdown.failure is not None:
        raise ValueError(f"{breakdown.engine_label} would refuse to start: {breakdown.failure.message}")
    device = gpu if hasattr(gpu, "vendor") else api.resolve_gpu(gpu, None)
    return render(Server(get_engine(engine), model, dict(settings), breakdown.engine_version, device.vendor), kind)
