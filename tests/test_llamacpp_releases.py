from vram_detective.engines.llamacpp.releases import RULES, rule, rule_names


def test_log_prefixes_by_build():
    assert rule("log.load_tensors", 3600) == "llm_load_tensors"
    assert rule("log.load_tensors", 5274) == "load_tensors"
    assert rule("log.kv_cache", 5274) == "llama_kv_cache_unified"
    assert rule("log.kv_cache", 7342) == "llama_kv_cache"
    assert rule("log.context", 3600) == "llama_new_context_with_model"


def test_defaults_by_build():
    assert rule("flash_attn.default", 5622) == "off"
    assert rule("flash_attn.default", 7342) == "auto"
    assert rule("kv.padding_no_fa", 5622) == 32 and rule("kv.padding_fa", 5622) == 256
    assert rule("kv.iswa", 5000) is False and rule("kv.iswa", 6000) is True


def test_every_rule_cites_a_source_and_has_a_base_row():
    for name in rule_names():
        assert any(r.since == (0,) for r in RULES if r.rule == name), name
    assert all(r.source for r in RULES)
