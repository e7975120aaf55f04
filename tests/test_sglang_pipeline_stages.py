"""SGLang's pipeline stages sized each on its own (engines/sglang/stages.py, plan.startups): the layers get_pp_indices
gives each rank, the embedding on the first stage and the final norm + lm_head on the last, each stage's KV cell
of its own layers at the one token count the ranks agree on (MIN over the world group), and one DeviceFigures per
GPU with that stage's weights, KV pool and nvidia-smi figure. Hand counts from the catalog's config.json."""
from __future__ import annotations

import json

import pytest

from vram_detective import api
from vram_detective.cli import main
from vram_detective.engines import get_engine
from vram_detective.engines.sglang import plan as sglang_plan
from vram_detective.engines.sglang.pool import mamba_state
from vram_detective.engines.sglang.releases import rules
from vram_detective.engines.sglang.stages import PartitionError, layer_counts

BF16 = 2
# Qwen3-8B config.json: hidden 4096, intermediate 12288, 36 layers, 32 heads, 8 KV heads, head_dim 128,
# vocab 151936 (a multiple of 64: no padding), q/k norms of head_dim, untied embeddings
Q8 = dict(hidden=4096, inter=12288, heads=32, kv=8, head_dim=128, vocab=151936)
# Qwen3-32B: hidden 5120, intermediate 25600, 64 layers, 64 heads, 8 KV heads, head_dim 128, untied
Q32 = dict(hidden=5120, inter=25600, heads=64, kv=8, head_dim=128, vocab=151936)


def _layer_params(c: dict, tp: int) -> int:
    """One decoder layer on one TP rank: fused qkv and gate_up column-sharded, o and down row-sharded, the two
    RMSNorms and the q/k norms replicated."""
    qkv = c["hidden"] * (c["heads"] + 2 * c["kv"]) * c["head_dim"] // tp
    o = c["heads"] * c["head_dim"] * c["hidden"] // tp
    gate_up = c["hidden"] * 2 * c["inter"] // tp
    down = c["inter"] * c["hidden"] // tp
    return qkv + o + gate_up + down + 2 * c["hidden"] + 2 * c["head_dim"]


def _roles(model: str, **settings) -> list[dict]:
    spec = api.model_spec(model)
    gpu = api.resolve_gpu("H100", None)
    engine = get_engine("sglang")
    return [inventory.bytes_by_role() for _, inventory in
            engine.rank_inventories(spec, gpu, settings, engine.releases.resolve(None))]


SCALARS = 7 * 4  # per layer: the attention's fp32 _k/_v/_q/_prob_scale and q/k/v_range (vLLM's layout, shared)


def _layer_bytes(roles: dict) -> int:
    return roles["attention"] + roles["mlp"] + roles["norm"]


def _layers(count: int, c: dict, tp: int) -> int:
    return count * (_layer_params(c, tp) * BF16 + SCALARS)


@pytest.mark.parametrize("tp", [1, 2])
def test_pp2_stage0_holds_the_embedding_and_stage1_the_lm_head(tp):
    """Qwen3-32B PP 2 (x TP 2): 32 layers a stage; the vocab x hidden table on stage 0 as the embedding, on stage 1
    as the lm_head (untied), both sharded by TP; the final norm (hidden) on stage 1 only."""
    stage0, stage1 = _roles("Qwen/Qwen3-32B", pp_size=2, tp_size=tp)
    table = Q32["vocab"] // tp * Q32["hidden"] * BF16
    assert (stage0["embedding"], stage0["lm_head"]) == (table, 0)
    assert (stage1["embedding"], stage1["lm_head"]) == (0, table)
    assert _layer_bytes(stage0) == _layers(32, Q32, tp)
    assert _layer_bytes(stage1) == _layers(32, Q32, tp) + Q32["hidden"] * BF16  # + model.norm


def test_pp3_middle_stage_holds_no_vocabulary_table():
    """Qwen3-8B PP 3: 12 layers a stage; the middle stage has neither the embedding nor the lm_head, so its
    GPU's weights and nvidia-smi figure are one vocabulary table (151936 x 4096 x 2 B = 1,187 MiB) below the
    others'."""
    roles = _roles("Qwen/Qwen3-8B", pp_size=3)
    assert [_layer_bytes(r) for r in roles] == [_layers(12, Q8, 1)] * 2 + [_layers(12, Q8, 1) + Q8["hidden"] * BF16]
    assert [r["embedding"] + r["lm_head"] for r in roles] == [Q8["vocab"] * Q8["hidden"] * BF16, 0,
                                                              Q8["vocab"] * Q8["hidden"] * BF16]
    b = api.explain("Qwen/Qwen3-8B", "H100", engine="sglang", pp_size=3)
    first, middle, last = b.devices
    table_mib = Q8["vocab"] * Q8["hidden"] * BF16 / (1 << 20)
    assert first.weights_bytes - middle.weights_bytes == pytest.approx(Q8["vocab"] * Q8["hidden"] * BF16, abs=4 << 20)
    assert first.nvidia_smi_used_mib - middle.nvidia_smi_used_mib == pytest.approx(table_mib, abs=4)
    assert (b.weights_bytes, b.nvidia_smi_used_mib) == (first.weights_bytes, first.nvidia_smi_used_mib)


def _stage_cell(layers: int, c: dict, tp: int) -> int:
    return layers * 2 * (c["kv"] // tp) * c["head_dim"] * BF16


@pytest.mark.parametrize("tp", [1, 2])
def test_pp2_each_stage_sizes_its_own_layers_at_one_token_count(tp, capsys):
    """Qwen3-8B PP 2 (x TP 2): each stage's cell is its 18 layers (73,728 B a token; 36,864 with TP 2), not
    the model's 36; every GPU allocates the agreed tokens (+ slot 0's page) x its own cell, and --json's devices
    carry each GPU's figures."""
    b = api.explain("Qwen/Qwen3-8B", "H100", engine="sglang", pp_size=2, tp_size=tp)
    cell = _stage_cell(18, Q8, tp)
    assert b.kv_bytes_per_token == cell == (73_728 if tp == 1 else 36_864)
    rows = b.kv_cache_tokens + b.figure("page_size")
    assert [d.kv_cache_bytes for d in b.devices] == [rows * cell] * (2 * tp)
    assert b.kv_cache_bytes == rows * cell
    assert [d.role for d in b.devices][-1] == ("TP rank 1, " if tp == 2 else "") + "stage 1, layers 18-35"
    code = main(["explain", "Qwen/Qwen3-8B", "--engine", "sglang", "--gpu", "H100", "-pp", "2", "-tp", str(tp),
                 "--json"])
    devices = json.loads(capsys.readouterr().out)["devices"]
    assert code == 0 and len(devices) == 2 * tp
    for shown, device in zip(devices, b.devices):
        assert shown["kv_cache_gib"] == round(rows * cell / (1 << 30), 4)
        assert shown["weights_gib"] == round(device.weights_bytes / (1 << 30), 4)
        assert shown["nvidia_smi_used_mib"] == device.nvidia_smi_used_mib
        assert "sized as stage 0" not in shown["role"]


def test_uneven_stages_agree_on_the_fullest_cells_tokens():
    """Qwen3-8B PP 5: 36 layers split 7,7,7,7,8 (0.5.6+: the remainder on the last stages); stage 4's 8-layer
    cell (32,768 B a token) binds, every stage keeps its count (0.5.2+ all_reduce MIN), and stage 4 fills its rest
    to within a cell while stage 0 (7 layers: 28,672 B) leaves the difference unused."""
    spec, gpu = api.model_spec("Qwen/Qwen3-8B"), api.resolve_gpu("H100", None)
    ranks = sglang_plan.startups(spec, gpu, {"pp_size": 5}, (0, 5, 23))
    assert [d.role for d in api.explain("Qwen/Qwen3-8B", "H100", engine="sglang", pp_size=5).devices] == [
        "stage 0, layers 0-6", "stage 1, layers 7-13", "stage 2, layers 14-20", "stage 3, layers 21-27",
        "stage 4, layers 28-35"]
    tokens = {st.pool.max_total_num_tokens for st in ranks}
    assert len(tokens) == 1
    tokens = tokens.pop()
    cells = [_stage_cell(n, Q8, 1) for n in (7, 7, 7, 7, 8)]
    assert [st.pool_bytes for st in ranks] == [(tokens + st.settings.page_size) * cell for st, cell in zip(ranks, cells)]
    rest = int(ranks[4].pool.rest_gib * (1 << 30))
    assert tokens == rest // cells[4]
    assert ranks[0].pool.rest_gib == ranks[4].pool.rest_gib  # the MIN over ranks: stage 4 loaded most
    unused = [st.static_budget - st.weights - st.pool_bytes for st in ranks]
    assert -cells[4] < unused[4] < cells[4]  # within a cell (slot 0's padding row is beyond the rest)
    page = ranks[0].settings.page_size
    assert unused[0] == unused[4] + (tokens + page) * (cells[4] - cells[0]) + (ranks[4].weights - ranks[0].weights)
    assert unused[0] > 7 << 30  # 8 GiB of stage 0's budget stays free memory


def test_before_0_5_2_each_stage_keeps_its_own_tokens():
    """model_runner.py 0.5.1 had no MIN over the stages' max_total_num_tokens: the 7-layer stages hold more tokens
    than the 8-layer last stage (0.5.1 split the remainder the old way too: all on the last stage, 7,7,7,7,8)."""
    spec, gpu = api.model_spec("Qwen/Qwen3-8B"), api.resolve_gpu("H100", None)
    ranks = sglang_plan.startups(spec, gpu, {"pp_size": 5}, (0, 5, 1))
    first, last = ranks[0].pool.max_total_num_tokens, ranks[4].pool.max_total_num_tokens
    assert first == int(ranks[0].pool.rest_gib * (1 << 30)) // _stage_cell(7, Q8, 1) > last


def test_layer_split_by_release_and_partition():
    """get_pp_indices: <= 0.5.5 the last stage takes the whole remainder, 0.5.6+ the last `remainder` stages one
    each; SGLANG_PP_LAYER_PARTITION's counts override it, and SGLang's ValueErrors for a bad one."""
    assert layer_counts(36, 8, rules("0.5.5")) == (4, 4, 4, 4, 4, 4, 4, 8)
    assert layer_counts(36, 8, rules("0.5.6")) == (4, 4, 4, 4, 5, 5, 5, 5)
    assert layer_counts(36, 2, rules("0.5.23")) == (18, 18)
    assert layer_counts(36, 2, rules("0.5.23"), "20,16") == (20, 16)
    assert layer_counts(36, 1, rules("0.5.23"), "20,16") == (36,)  # a singleton PP group ignores it
    with pytest.raises(PartitionError, match="does not match pp_size=2"):
        layer_counts(36, 2, rules("0.5.23"), "12,12,12")
    with pytest.raises(PartitionError, match="does not match num_hidden_layers=36"):
        layer_counts(36, 2, rules("0.5.23"), "20,20")


def test_more_stages_than_layers_is_refused():
    with pytest.raises(api.EngineRefused, match="num_hidden_layers >= pp_size"):
        api.explain("Qwen/Qwen3-0.6B", "H100", engine="sglang", pp_size=64)


def test_partition_from_the_launch_line_moves_layers_between_gpus(capsys):
    """SGLANG_PP_LAYER_PARTITION=20,16 before the launcher: stage 0 builds 20 layers (its cell 20 x 4,096 B binds
    the agreed tokens), stage 1 16; the launch line the tool writes carries the variable back."""
    line = ["SGLANG_PP_LAYER_PARTITION=20,16", "python", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B",
            "--pp", "2"]
    assert get_engine("sglang").launch.parse(line).settings == {"pp_size": 2, "pp_layer_partition": "20,16"}
    assert get_engine("sglang").launch_line("Qwen/Qwen3-8B", {"pp_size": 2, "pp_layer_partition": "20,16"}) == \
        " ".join(line)
    roles = _roles("Qwen/Qwen3-8B", pp_size=2, pp_layer_partition="20,16")
    assert [_layer_bytes(r) for r in roles] == [_layers(20, Q8, 1), _layers(16, Q8, 1) + Q8["hidden"] * BF16]
    assert main(["explain", "--gpu", "H100", "--json", "--", *line]) == 0
    figures = json.loads(capsys.readouterr().out)
    rows = figures["kv_cache_tokens"] + 1  # page size 1: slot 0's row
    assert [d["kv_cache_gib"] for d in figures["devices"]] == [round(rows * _stage_cell(n, Q8, 1) / (1 << 30), 4)
                                                               for n in (20, 16)]
    assert figures["kv_cache_tokens"] == api.explain("Qwen/Qwen3-8B", "H100", engine="sglang", pp_size=2,
                                                     pp_layer_partition="20,16").kv_cache_tokens
    assert main(["explain", "--gpu", "H100", "--", *line[:1], "x=1", *line[1:]]) == 0  # other variables: not read
    capsys.readouterr()
    assert main(["explain", "--gpu", "H100", "--", "SGLANG_PP_LAYER_PARTITION=20,20", *line[1:]]) == 2
    assert "sum(partitions)=40 does not match num_hidden_layers=36" in capsys.readouterr().err


def test_a_later_stage_that_cannot_start_stops_the_server():
    """Qwen3-32B, 24 + 40 layers on A100 40GB: stage 1 (38 GiB of weights) leaves no KV memory. 0.4.6.post2 with
    --tp 1 sized each stage from its own free memory: stage 0 had a pool, stage 1 none, and the server stops on
    stage 1; from 0.4.7 the MIN over ranks gives every stage stage 1's rest, so none has a pool."""
    common = dict(engine="sglang", pp_size=2, pp_layer_partition="24,40")
    old = api.explain("Qwen/Qwen3-32B", "A100 40GB", engine_version="0.4.6.post2", **common)
    assert old.kv_cache_tokens > 0 and old.failure.message.startswith("stage 1 (GPU 1): ")
    new = api.explain("Qwen/Qwen3-32B", "A100 40GB", engine_version="0.5.23", **common)
    assert new.kv_cache_tokens == 0 and not new.failure.message.startswith("stage")


# Qwen3.5-27B: 64 layers, every 4th full attention (4 KV heads x 256: 4,096 B a token and layer in bf16), the
# other 48 Gated DeltaNet layers with a conv + SSM state per request
Q35 = "Qwen/Qwen3.5-27B"


def test_hybrid_stages_hold_their_own_attention_and_state_layers():
    """SGLANG_PP_LAYER_PARTITION=30,34: stage 0 holds 7 attention + 23 GDN layers, stage 1 9 + 25. Each stage's
    cell is its own attention layers, the 9-layer cell binds the tokens; both stages keep the same Mamba slots
    (0.5.17+: charged the largest stage's 25 layers, 0.5.16: all 48) and each allocates them for its own GDN
    layers only (the 48 layers' state / 48 each)."""
    spec, gpu = api.model_spec(Q35), api.resolve_gpu("H100", None)
    whole = mamba_state(spec, 1, rules("0.5.23"))
    conv, ssm = whole.conv_bytes // 48, whole.ssm_bytes // 48
    slots = {}
    for version in ((0, 5, 16), (0, 5, 23)):
        ranks = sglang_plan.startups(spec, gpu, {"pp_size": 2, "pp_layer_partition": "30,34"}, version)
        tokens = ranks[0].pool.max_total_num_tokens
        assert tokens == ranks[1].pool.max_total_num_tokens
        assert [st.pool_bytes for st in ranks] == [(tokens + 1) * n * 4096 for n in (7, 9)]
        assert ranks[0].pool.mamba_slots == ranks[1].pool.mamba_slots
        slots[version] = rows = ranks[0].pool.mamba_slots
        for st, layers in zip(ranks, (23, 25)):
            assert round(st.pool.mamba_conv_gib * (1 << 30)) == (rows + 1) * layers * conv
            assert round(st.pool.mamba_ssm_gib * (1 << 30)) == (rows + 1) * layers * ssm
    assert slots[(0, 5, 23)] > 1.8 * slots[(0, 5, 16)]  # 25 layers' charge against 48


def test_a_stage_without_kv_layers():
    """PP 64 puts one layer on each stage: stage 0's only layer is GDN. Before 0.5.17 its rest // cell size 0
    fails (ZeroDivisionError); from 0.5.17 it holds no KV pool and takes the other stages' token count."""
    with pytest.raises(api.EngineRefused, match="ZeroDivisionError"):
        api.explain(Q35, "H100", engine="sglang", engine_version="0.5.16", pp_size=64)
    b = api.explain(Q35, "H100", engine="sglang", engine_version="0.5.23", pp_size=64)
    assert b.failure is None and b.kv_cache_tokens > 0
    kv = [d.kv_cache_bytes for d in b.devices]
    assert kv[:3] == [0, 0, 0] and kv[3] == (b.kv_cache_tokens + 1) * 4096  # layer 3: the first full attention


def test_hybrid_swa_stages_sync_the_figure_their_release_syncs():
    """Gemma 4 26B-A4B PP 2: 30 layers, every 6th full (F = 4,096 B a token and layer), the rest sliding
    (S = 8,192 B); stage 0 holds 2 full + 13 sliding layers, stage 1 3 + 12. 0.5.13+ syncs the full pool's tokens
    (the SWA pool is full x 0.8 on every stage); 0.5.10-0.5.12 synced the capacity before each stage split it by
    its own layers, so the stages' full pools differ."""
    spec, gpu = api.model_spec("google/gemma-4-26B-A4B-it"), api.resolve_gpu("H100", None)
    new = sglang_plan.startups(spec, gpu, {"pp_size": 2}, (0, 5, 23))
    full, swa = new[0].pool.max_total_num_tokens, new[0].pool.swa_tokens
    assert [(st.pool.max_total_num_tokens, st.pool.swa_tokens) for st in new] == [(full, swa)] * 2
    assert swa == int(full * 0.8)
    assert [st.pool_bytes for st in new] == [(full + 1) * f * 4096 + (swa + 1) * w * 8192 for f, w in ((2, 13), (3, 12))]
    old = sglang_plan.startups(spec, gpu, {"pp_size": 2}, (0, 5, 12))
    capacity = min(st.pool.synced_tokens for st in old)  # rest // (every layer's F or S), the MIN over stages
    # each stage: full = capacity x (F f + S w) / (F f + 0.8 S w), from its own f full and w sliding layers
    assert [st.pool.max_total_num_tokens for st in old] == [
        capacity * (4096 * f + 8192 * w) * 10 // (10 * 4096 * f + 8 * 8192 * w) for f, w in ((2, 13), (3, 12))]


def test_speculative_draft_lives_on_the_last_stage():
    """0.5.19+ (eagle_worker_v2.py): only the last stage hosts the draft worker. Qwen3-8B PP 2 with a Qwen3-0.6B
    STANDALONE draft: GPU 1 holds the draft's weights and its 28 KV layers beside its own 18 (4,096 B a token and
    layer in both models), GPU 0 its 18 alone at the same token count. Up to 0.5.18 server_args.py refuses the pair."""
    common = dict(engine="sglang", pp_size=2, speculative_algorithm="STANDALONE",
                  speculative_draft_model_path="Qwen/Qwen3-0.6B")
    b = api.explain("Qwen/Qwen3-8B", "H100", engine_version="0.5.23", **common)
    first, last = b.devices
    rows = b.kv_cache_tokens + 1
    assert (first.kv_cache_bytes, last.kv_cache_bytes) == (rows * 18 * 4096, rows * (18 + 28) * 4096)
    assert [p.key for p in first.parts if "draft" in p.key] == [] and "draft_weights" in [p.key for p in last.parts]
    assert b.figure("draft_weights_bytes") is None  # GPU 0's figures: no draft there
    with pytest.raises(api.EngineRefused, match="not compatible with overlap schedule, speculative decoding$"):
        api.explain("Qwen/Qwen3-8B", "H100", engine_version="0.5.18", **common)
    with pytest.raises(api.EngineRefused, match="speculative decoding, mixed chunked prefill"):
        api.explain("Qwen/Qwen3-8B", "H100", engine_version="0.5.10", **common)
