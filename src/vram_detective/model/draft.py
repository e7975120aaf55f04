"""What a checkpoint says about speculative decoding: its own multi-token-prediction layers, and, when it is
itself a draft (EAGLE / Medusa heads), the sizes its config.json gives for them."""
from __future__ import annotations

from dataclasses import dataclass

# config keys naming the MTP layers (DeepSeek-V3 / GLM-4.5: num_nextn_predict_layers, Qwen3-Next / Qwen3.5:
# mtp_num_hidden_layers, MiMo: num_mtp_layers)
_MTP_LAYER_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers")


@dataclass(frozen=True)
class DraftFacts:
    mtp_layers: int = 0  # the model's own MTP layers (0: none)
    draft_vocab_size: int | None = None  # EAGLE-3 heads with a reduced vocabulary
    medusa_heads: int | None = None  # Medusa: num_heads
    medusa_blocks: int | None = None  # Medusa: residual blocks per head (its num_hidden_layers)
    medusa_original_lm_head: bool = False  # Medusa: one shared lm_head instead of one per head


def draft_facts(config: dict) -> DraftFacts:
    mtp = 0
    for source in (config, config.get("text_config") or {}):
        found = next((int(source[key]) for key in _MTP_LAYER_KEYS if source.get(key)), 0)
        if found:
            mtp = found
            break
    vocab, heads, blocks = config.get("draft_vocab_size"), config.get("num_heads"), config.get("num_hidden_layers")
    return DraftFacts(mtp_layers=mtp, draft_vocab_size=int(vocab) if vocab else None,
                      medusa_heads=int(heads) if heads else None, medusa_blocks=int(blocks) if blocks else None,
                      medusa_original_lm_head=bool(config.get("original_lm_head")))
