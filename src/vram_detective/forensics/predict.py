"""The prediction a log is compared with, made without stopping at a setting the model refuses."""
from __future__ import annotations


def explain_quietly(model: str, gpu, version: str | None, settings: dict, source: str | None = "catalog",
                    engine: str | None = None):
    """api.explain (of `engine`, by default the default engine), retrying without settings the model refuses
    (e.g. a max_model_len above its own)."""
    from .. import api

    engine_named = {"engine": engine} if engine else {}
    attempts = [settings]
    if "max_model_len" in settings:
        attempts.append({k: v for k, v in settings.items() if k != "max_model_len"})
    last = None
    for attempt in attempts:
        try:
            return api.explain(model, gpu, vllm_version=version, source=source, **engine_named, **attempt), None
        except Exception as error:  # noqa: BLE001 - a search over the catalog skips what cannot be sized
            last = error
            if "Bfloat16" in str(error) and "dtype" not in attempt:
                try:  # pre-Ampere card: the run must have used float16 (same bytes)
                    return api.explain(model, gpu, vllm_version=version, source=source, dtype="float16",
                                       **engine_named, **attempt), None
                except Exception as retry:  # noqa: BLE001
                    last = retry
    return None, last
