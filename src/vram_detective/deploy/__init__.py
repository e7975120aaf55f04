"""Deployment files (compose, Kubernetes, Helm values, the command) from a prediction; `watch` lives beside."""
