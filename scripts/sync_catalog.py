"""Copy ../shared/models/*/config.json into the packaged catalog (src/vram_detective/model/catalog).

Each catalog file is {"repo_id", "source", "config"}; scripts/derived_models.json adds models whose
config is a catalog base plus stated overrides (a quantization block, a vocabulary size; "nested_overrides"
merge into a sub-dict such as text_config, "remove" drops keys such as the FP8 base's quantization_config), or
a whole "config" reconstructed from the published config.json (multimodal models with no base here); a ModelOpt hf_quant_config.json next to a
config is folded into config["quantization_config"] the way vLLM reads it (modelopt.py).
Run from the repository root: python scripts/sync_catalog.py
"""
import json
import re
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[1]
shared = root.parent / "shared" / "models"
target = root / "src" / "vram_detective" / "model" / "catalog"


def provenance(folder: Path) -> str:
    source = folder / "SOURCE.md"
    if not source.exists():
        return "shared/models (no SOURCE.md)"
    for line in source.read_text().splitlines():
        match = re.match(r"-\s*Source:\s*(.*)", line)
        if match:
            return match.group(1).strip()[:300]
    return "shared/models"


def _changed_keys(item: dict) -> list[str]:
    keys = sorted(item.get("overrides", {}))
    keys += [f"{key}.{inner}" for key, values in sorted(item.get("nested_overrides", {}).items()) for inner in sorted(values)]
    return keys + [f"-{key}" for key in item.get("remove", ())]


def main() -> int:
    if not shared.is_dir():
        print(f"no {shared}", file=sys.stderr)
        return 1
    target.mkdir(parents=True, exist_ok=True)
    for old in target.glob("*.json"):
        old.unlink()
    count = 0
    for folder in sorted(shared.iterdir()):
        config_path = folder / "config.json"
        if not config_path.is_file():
            continue
        config = json.loads(config_path.read_text())
        quant_path = folder / "hf_quant_config.json"
        if quant_path.is_file() and "quantization_config" not in config:
            quant = json.loads(quant_path.read_text()).get("quantization", {})
            config["quantization_config"] = {"quant_method": "modelopt", **quant}
        org, _, name = folder.name.partition("--")
        entry = {"repo_id": f"{org}/{name}", "source": provenance(folder), "config": config}
        (target / f"{folder.name}.json").write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n")
        count += 1
    derived = json.loads((root / "scripts" / "derived_models.json").read_text())
    built: dict[str, dict] = {}
    for item in derived:
        if "config" in item:
            # a whole config reconstructed from the published one (no base in shared/models to derive from)
            entry = {"repo_id": item["repo_id"], "source": f"reconstructed: {item['note']}",
                     "config": {**item["config"], "_name_or_path": item["repo_id"]}}
            (target / (item["repo_id"].replace("/", "--", 1) + ".json")).write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n")
            count += 1
            continue
        base_path = shared / item["base"].replace("/", "--", 1) / "config.json"
        # a base is a shared/models config or a derived entry listed before this one
        config = json.loads(base_path.read_text()) if base_path.is_file() else dict(built[item["base"]])
        config.update(item.get("overrides", {}))
        for key, values in item.get("nested_overrides", {}).items():
            config[key] = {**config.get(key, {}), **values}  # e.g. a vision_config / text_config key or two
        for key in item.get("remove", ()):
            config.pop(key, None)  # e.g. the FP8 base's quantization_config for the bf16 release
        config["_name_or_path"] = item["repo_id"]
        entry = {"repo_id": item["repo_id"], "derived_from": item["base"],
                 "source": f"derived: {item['base']} config.json + {_changed_keys(item)} ({item['note']})",
                 "config": config}
        (target / (item["repo_id"].replace("/", "--", 1) + ".json")).write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n")
        built[item["repo_id"]] = config
        count += 1
    total = len(list(target.glob("*.json")))
    print(f"{total} configs -> {target.relative_to(root)} ({len(derived)} derived or corrected)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
