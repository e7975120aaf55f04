"""`--emit compose|k8s|helm-values|command` on explain / whatif / fit: the deployment that reproduces the answer.

explain and whatif emit the settings they were given (whatif's baseline); fit emits its best candidate, read back
from the launch line it prints through the engine's own parser, so what is emitted is what `explain` checks."""
from __future__ import annotations

import json
import sys


def _vendor(args) -> str:
    from .. import api

    gpu = getattr(args, "gpu", None)
    if not gpu or gpu.strip().lower() == "auto":
        return "nvidia"
    try:
        return api.resolve_gpu(gpu, None).vendor
    except ValueError:
        return "nvidia"


def emit(args, model: str, settings: dict, breakdown, vendor: str | None = None) -> int:
    """Print the deployment of one prediction (exit 1, no file, when the engine would refuse to start)."""
    from ..engines import get_engine
    from ..errors import BadInput
    from .files import Server

    engine = get_engine(breakdown.engine_name)
    if breakdown.failure is not None:
        print(f"{engine.label} would refuse to start: {breakdown.failure.message}", file=sys.stderr)
        return 1
    if engine.deployment is None:
        raise BadInput(f"--emit: {engine.label} has no server deployment in this tool")
    vendor = vendor or _vendor(args)
    if vendor == "apple":
        raise BadInput("--emit: containers get no Apple GPU (Metal); run the engine natively: --emit command")
    given = {key: value for key, value in settings.items() if value is not None}
    server = Server(engine, model, given, breakdown.engine_version, vendor)
    print(render(server, args.emit, as_json=bool(getattr(args, "json", False))), end="")
    return 0


def render(server, kind: str, as_json: bool = False) -> str:
    from ..errors import BadInput
    from . import files
    from .yaml_text import dump

    if kind == "command":
        body = files.command_text(server)
        if as_json:
            return json.dumps({"command": body, "argv": server.argv(), "env": server.env()}, indent=2) + "\n"
        return "".join(f"# {line}\n" for line in files.header(server, kind)) + body + "\n"
    if kind == "compose":
        documents = [files.compose(server)]
    elif kind == "k8s":
        documents = files.k8s(server)
    else:
        values = files.helm_values(server)
        if values is None:
            raise BadInput(f"--emit helm-values: {server.engine.label} has no common Helm chart; --emit k8s writes "
                           "the Deployment and Service")
        documents = [values]
    if as_json:
        return json.dumps(documents if kind == "k8s" else documents[0], indent=2) + "\n"
    head = "".join(f"# {line}\n" for line in files.header(server, kind))
    return head + "---\n".join(dump(document) for document in documents)


def emit_advisor(args) -> int:
    """whatif --emit: the baseline (the settings given); fit --emit: the best candidate's launch line."""
    if args.command == "whatif":
        return _emit_given(args)
    return _emit_fit(args)


def _emit_given(args) -> int:
    from .. import api
    from ..advisor.command import _gpu, _settings, _sources
    from ..engines import DEFAULT_ENGINE

    settings = _settings(args)
    if getattr(args, "entrypoint", None):
        settings["entrypoint"] = args.entrypoint
    engine_path = settings.pop("engine", None)
    gpu = _gpu(args)
    breakdown = api.explain(args.model, gpu, engine=args.engine_name or DEFAULT_ENGINE, engine_version=args.engine_version,
                            vllm_engine=engine_path, **settings, **_sources(args))
    if engine_path:
        settings["engine"] = engine_path
    return emit(args, args.model, settings, breakdown, gpu.vendor)


def _emit_fit(args) -> int:
    """Run fit as --json, take the first candidate's command, read it back with the engine's parser, explain it."""
    import contextlib
    import io
    import shlex

    from .. import api
    from ..advisor.command import _gpu, _sources
    from ..advisor.command import run as run_fit
    from ..engines import get_engine

    wanted_json, emit_kind = args.json, args.emit
    args.json, args.emit = True, None
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = run_fit(args)
    args.json, args.emit = wanted_json, emit_kind
    if code != 0:
        print("fit found nothing that meets the target: no deployment to write", file=sys.stderr)
        return code
    answer = json.loads(buffer.getvalue())
    best = (answer.get("candidates") or answer.get("answers") or [None])[0]
    engine = get_engine(args.engine_name)
    line = engine.launch.parse(shlex.split(best["command"]))
    settings = dict(line.settings)
    if getattr(args, "gguf_type", None):
        settings["gguf_type"] = args.gguf_type
    model = best.get("model") or args.model
    if getattr(engine.deployment, "model_in_file", False):
        model = args.model  # the fit line names a GGUF file by the model; the deployment mounts the real one
    gpu = _gpu(args)
    breakdown = api.explain(model, gpu, engine=engine.name, engine_version=args.engine_version, **settings,
                            **_sources(args))
    return emit(args, model, settings, breakdown, gpu.vendor)
