"""Write the published schemas the deployment tests validate against (tests/data/schemas/), from the packages that
ship them on PyPI:

- the Compose Specification's JSON schema: docker-compose 1.29.2 ships it as compose/config/compose_spec.json;
- Kubernetes 1.36's Deployment (apps/v1) and Service (v1) schemas in their strict form: kubernetes-validate 1.37.0
  ships yannh/kubernetes-json-schema's `v1.36.0-local-strict`; `_definitions.json` is cut down to the definitions the
  two reach (the rest of the 1.6 MB file is other kinds), unchanged otherwise.

usage: python scripts/bundle_deploy_schemas.py [--wheels DIR]   (downloads the two wheels with pip when DIR is empty)
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "schemas"
K8S = "kubernetes_validate/kubernetes-json-schema/v1.36.0-local-strict/"
WHEELS = ("docker-compose==1.29.2", "kubernetes-validate==1.37.0")


def _wheel(directory: Path, prefix: str) -> zipfile.ZipFile:
    return zipfile.ZipFile(next(directory.glob(f"{prefix}-*.whl")))


def _refs(node, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and "#/$defs/" in ref:
            found.add(ref.split("#/$defs/", 1)[1])
        for value in node.values():
            _refs(value, found)
    elif isinstance(node, list):
        for value in node:
            _refs(value, found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=Path, default=None)
    args = parser.parse_args()
    directory = args.wheels or Path(tempfile.mkdtemp())
    if not list(directory.glob("*.whl")):
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(directory),
                        *WHEELS], check=True)
    OUT.mkdir(parents=True, exist_ok=True)
    compose = json.loads(_wheel(directory, "docker_compose").read("compose/config/compose_spec.json"))
    (OUT / "compose-spec.json").write_text(json.dumps(compose, indent=1) + "\n")
    k8s = _wheel(directory, "kubernetes_validate")
    kinds = {name: json.loads(k8s.read(K8S + name)) for name in ("deployment-apps-v1.json", "service-v1.json")}
    definitions = json.loads(k8s.read(K8S + "_definitions.json"))
    wanted: set[str] = set()
    _refs(kinds, wanted)
    done: set[str] = set()
    while wanted - done:
        name = sorted(wanted - done)[0]
        done.add(name)
        _refs(definitions["$defs"][name], wanted)
    definitions["$defs"] = {name: definitions["$defs"][name] for name in sorted(done)}
    for name, schema in {**kinds, "_definitions.json": definitions}.items():
        (OUT / f"k8s-1.36-{name}").write_text(json.dumps(schema, indent=1) + "\n")
    print(f"wrote {OUT}: compose-spec.json, k8s-1.36-*.json ({len(done)} definitions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
