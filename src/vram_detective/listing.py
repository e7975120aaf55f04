"""`vram-detective models` and `vram-detective gpus`: the catalogs as rows (JSON) and as text, filtered."""
from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:gb|g|gib)?\s*$", re.IGNORECASE)


def _matches(words: list[str], *fields: str) -> bool:
    text = " ".join(fields).lower()
    return all(word.lower() in text for word in words)


def model_rows(words: list[str] | None = None) -> list[dict]:
    from .model.config import parse_config
    from .model.spec import ConfigError
    from .model.sources import catalog_entries

    rows = []
    for source in catalog_entries():
        architecture = (source.config.get("architectures") or ["?"])[0]
        if not _matches(words or [], source.repo_id, architecture):
            continue
        try:
            spec = parse_config(source.config, source.repo_id)
            quant = spec.quantization.describe() if spec.quantization else spec.torch_dtype
            rows.append({"model": source.repo_id, "architecture": spec.architecture, "layers": spec.num_layers,
                         "hidden": spec.hidden_size, "precision": quant, "supported": True})
        except (ConfigError, ValueError) as error:
            rows.append({"model": source.repo_id, "architecture": architecture, "supported": False, "why": str(error)})
    return rows


def _markdown(headers: tuple, rows: list[tuple], aligns: str) -> list[str]:
    return (["| " + " | ".join(headers) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in aligns) + "|"]
            + ["| " + " | ".join(str(cell).replace("|", "/") for cell in row) + " |" for row in rows])


def models_text(rows: list[dict], words: list[str] | None, markdown: bool = False, columns: int | None = None) -> str:
    from .term import columns_text

    headers = ("model", "layers", "hidden", "precision · architecture")
    table = [(r["model"], str(r.get("layers", "")), f"{r['hidden']:,}" if r.get("hidden") else "",
              f"{r['precision']} · {r['architecture']}" if r["supported"]
              else f"{r['architecture']}: not yet: {r['why']}") for r in rows]
    filtered = f" matching {' '.join(words)!r}" if words else ""
    footer = f"{len(rows)} models{filtered}, {sum(r['supported'] for r in rows)} sized today"
    if not rows:
        return f"no catalog model{filtered} (a Hub repo id or a local directory works too)"
    if markdown:
        return "\n".join(_markdown(headers, table, "lrrl") + ["", footer])
    return "\n".join(columns_text(table, "lrrl", columns, indent="", header=headers) + [footer])


def _size_filter(words: list[str]):
    """A memory size (16GB, 24G, 80): the cards of about that size; a bare number from 1000 up is a model number."""
    match = _SIZE.match(words[0]) if len(words) == 1 else None
    if match and (float(match.group(1)) < 1000 or words[0][-1:].isalpha()):
        return float(match.group(1))
    return None


def _nominal_gb(gpu) -> int:
    """The size on the box (16 GB): nvidia-smi's total in GiB, rounded."""
    mib = gpu.nvidia_smi_total_mib or gpu.cuda_total_bytes / (1 << 20)
    return round(mib / 1024)


def gpu_rows(words: list[str] | None = None) -> list[dict]:
    from .hardware import all_gpus, normalize_gpu_key

    size = _size_filter(words or [])
    out = []
    for g in all_gpus():
        if size is not None:
            if _nominal_gb(g) != round(size):
                continue
        elif words and not all(normalize_gpu_key(word) in normalize_gpu_key(" ".join((g.name, g.short_name, *g.aliases)))
                               for word in words):
            continue
        out.append({"name": g.name, "short_name": g.short_name, "aliases": list(g.aliases),
                    "cuda_total_gib": round(g.cuda_total_gib, 2), "nvidia_smi_total_mib": g.nvidia_smi_total_mib,
                    "compute_capability": ".".join(map(str, g.compute_capability)), "bf16": g.supports_bf16,
                    "fp8": g.supports_fp8, "source": g.source})
    return out


def gpus_text(rows: list[dict], words: list[str] | None, markdown: bool = False, columns: int | None = None,
              verbose: bool = False) -> str:
    from .term import columns_text, wrap

    if not rows:
        return (f"no GPU in the catalog matches {' '.join(words or [])!r}; for another card pass --gpu-memory with "
                "its total as CUDA reports it")
    headers = ("GPU", "CUDA total", "nvidia-smi", "sm", "bf16", "fp8", "nvidia-smi name")
    table = [(r["short_name"], f"{r['cuda_total_gib']:.2f} GiB",
              f"{r['nvidia_smi_total_mib']:,} MiB" if r["nvidia_smi_total_mib"] else "-", r["compute_capability"],
              "yes" if r["bf16"] else "no", "yes" if r["fp8"] else "no",
              r["name"] if not verbose else ", ".join(dict.fromkeys([r["name"], *r["aliases"]]))) for r in rows]
    derived = sum("total derived" in r["source"] for r in rows)
    footer = [f"{len(rows)} GPUs" + (f" of about {' '.join(words)}" if _size_filter(words or []) else
                                     f" matching {' '.join(words)!r}" if words else "")
              + ". CUDA total: what the engines size from (torch.cuda.mem_get_info); nvidia-smi shows a little more."]
    if derived:
        footer.append(f"{derived} totals are derived from the vendor's size and a sibling card's reading, not observed "
                      "(--verbose shows each source)")
    if markdown:
        table = [row + ((r["source"],) if verbose else ()) for row, r in zip(table, rows)]
        return "\n".join(_markdown(headers + (("source",) if verbose else ()), table, "lrrrlll"[: len(table[0])]
                                   + ("l" if verbose else "")) + [""] + footer)
    out = columns_text(table, "lrrrlll", columns, indent="", header=headers)
    if verbose:
        out = []
        for row, r in zip(table, rows):
            out += columns_text([row], "lrrrlll", columns, indent="")
            out += wrap(f"source: {r['source']}", columns, "    ", "    ")
    return "\n".join(out + [line for text in footer for line in wrap(text, columns)])
