"""Deployment files from a prediction: a docker-compose service, a Kubernetes Deployment + Service, values for the
engine's common Helm chart, or the plain command. Everything engine-specific comes from `engine.deployment`
(engines/<engine>/deploy.py); this module only lays it out."""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass

GIB = 1 << 30


@dataclass(frozen=True)
class Server:
    """One engine server as the prediction had it."""

    engine: object  # engines.get_engine(name)
    model: str  # as the user gave it (repo id, local directory or .gguf file)
    settings: dict  # the given settings, in the engine's names
    release: str  # the release the prediction used ("0.10.2", "b7342")
    vendor: str = "nvidia"  # the GPU's vendor (nvidia.com/gpu or amd.com/gpu)

    @property
    def spec(self):
        return self.engine.deployment

    @property
    def name(self) -> str:
        base = os.path.basename(self.model.rstrip("/")) or "model"
        base = re.sub(r"\.gguf$", "", base, flags=re.IGNORECASE)
        slug = re.sub(r"[^a-z0-9]+", "-", f"{self.engine.name}-{base}".lower()).strip("-")
        return slug[:50].rstrip("-")

    @property
    def local(self) -> bool:
        return os.path.exists(self.model)

    def model_in_container(self) -> str:
        """The path or id the server reads: a local file or directory is mounted under /models."""
        if self.local:
            return f"/models/{os.path.basename(self.model.rstrip('/'))}"
        if self.spec.model_in_file:  # llama.cpp without a file: the GGUF to put in the models directory
            mix = self.settings.get("gguf_type") or "model"
            return f"/models/{self.model.rsplit('/', 1)[-1]}-{mix}.gguf"
        return self.model

    def host_models_dir(self) -> str | None:
        if self.local:
            return os.path.dirname(os.path.abspath(self.model.rstrip("/"))) or "/"
        return "./models" if self.spec.model_in_file else None

    def argv(self) -> list[str]:
        return self.spec.argv(self.model_in_container(), self.settings)

    def env(self) -> dict:
        return dict(self.spec.env(self.settings))

    def gpus(self) -> int:
        return max(int(self.spec.gpus(self.settings)), 1)

    def image(self) -> str:
        return self.spec.image(self.release)


def command_text(server: Server) -> str:
    """The container's command as one shell line (its variables first): what `explain -- ...` reads back."""
    env = [f"{key}={shlex.quote(value)}" for key, value in server.env().items()]
    return " ".join(env + [shlex.quote(word) for word in server.argv()])


def compose(server: Server) -> dict:
    """One docker-compose service (the Compose Specification): GPUs as a device reservation, /dev/shm, health."""
    spec = server.spec
    service: dict = {"image": server.image(), "entrypoint": server.argv(), "ports": [f"{spec.port}:{spec.port}"]}
    if server.env():
        service["environment"] = server.env()
    volumes = []
    if server.host_models_dir():
        volumes.append(f"{server.host_models_dir()}:/models:ro")
    elif spec.model_store:
        volumes.append(f"model-store:{spec.model_store}")
    if spec.hub_token and not server.local:
        service.setdefault("environment", {})["HF_TOKEN"] = "${HF_TOKEN:-}"
    if volumes:
        service["volumes"] = volumes
    if spec.shm_bytes:
        service["shm_size"] = f"{spec.shm_bytes // GIB}gb"
    if server.vendor == "amd":
        service["devices"] = ["/dev/kfd", "/dev/dri"]
        service["group_add"] = ["video"]
    else:
        service["deploy"] = {"resources": {"reservations": {"devices": [
            {"driver": "nvidia", "count": server.gpus(), "capabilities": ["gpu"]}]}}}
    service["healthcheck"] = {"test": ["CMD-SHELL", f"curl -fsS http://localhost:{spec.port}{spec.health_path} "
                                                    "|| exit 1"],
                              "interval": "30s", "timeout": "5s", "retries": 3, "start_period": "20m"}
    out = {"services": {server.name: service}}
    if any(volume.startswith("model-store:") for volume in volumes):
        out["volumes"] = {"model-store": {}}
    return out


def k8s(server: Server) -> list[dict]:
    """A Deployment (GPU requests, /dev/shm, readiness on the health endpoint) and a Service in front of it."""
    spec, name = server.spec, server.name
    gpu_key = "amd.com/gpu" if server.vendor == "amd" else "nvidia.com/gpu"
    container: dict = {"name": server.engine.name, "image": server.image(), "command": server.argv(),
                       "ports": [{"name": "http", "containerPort": spec.port}],
                       "resources": {"limits": {gpu_key: server.gpus()}, "requests": {gpu_key: server.gpus()}},
                       "readinessProbe": {"httpGet": {"path": spec.health_path, "port": spec.port},
                                          "initialDelaySeconds": 30, "periodSeconds": 10, "failureThreshold": 120}}
    env = [{"name": key, "value": value} for key, value in server.env().items()]
    mounts, volumes = [], []
    if spec.shm_bytes:
        mounts.append({"name": "shm", "mountPath": "/dev/shm"})
        volumes.append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{spec.shm_bytes // GIB}Gi"}})
    if server.host_models_dir():
        mounts.append({"name": "models", "mountPath": "/models", "readOnly": True})
        volumes.append({"name": "models", "hostPath": {"path": os.path.abspath(server.host_models_dir()),
                                                        "type": "Directory"}})
    elif spec.model_store:
        mounts.append({"name": "model-store", "mountPath": spec.model_store})
        volumes.append({"name": "model-store", "emptyDir": {}})
    if spec.hub_token and not server.local:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token",
                                                                        "optional": True}}})
    if env:
        container["env"] = env
    if mounts:
        container["volumeMounts"] = mounts
    pod: dict = {"containers": [container]}
    if volumes:
        pod["volumes"] = volumes
    labels = {"app": name}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
                  "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                           "template": {"metadata": {"labels": labels}, "spec": pod}}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": labels},
               "spec": {"selector": labels, "ports": [{"name": "http", "port": spec.port, "targetPort": spec.port}]}}
    return [deployment, service]


def helm_values(server: Server) -> dict | None:
    """Values for the engine's common chart; None when the engine has none (then --emit k8s)."""
    spec = server.spec
    if spec.helm is None:
        return None
    return spec.helm(server.model_in_container(), server.settings, server.release, server.gpus(), server.vendor)


def header(server: Server, kind: str) -> list[str]:
    """Comment lines above a file: what it reproduces and what it cannot carry."""
    lines = [f"{server.engine.label} {server.release} serving {server.model} on {server.gpus()} GPU(s): the "
             f"settings of the prediction (vram-detective explain reads this command back to the same figures)"]
    if kind == "helm-values":
        lines.append(f"values for {server.spec.helm_chart}")
    if server.spec.shm_source and kind in ("compose", "k8s"):
        lines.append(f"/dev/shm: {server.spec.shm_source}")
    lines += [f"note: {note}" for note in server.spec.notes(server.settings)]
    return lines
