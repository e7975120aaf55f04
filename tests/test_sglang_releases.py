"""SGLang rule changes 0.5.12-0.5.23, each pinned with the arithmetic of the releases on both sides of its boundary
(sources: the released wheels, `shared/tools/engine-src sglang VERSION`; see engines/sglang/releases.py)."""
from __future__ import annotations

import pytest

from vram_detective.engines.sglang.log_lines import log_lines
from vram_detective.engines.sglang.log_parser import parse_log
from vram_detective.engines.sglang.pool import PoolPrediction, cell_with_draft, max_running_requests
from vram_detective.engines.sglang.releases import NEWEST_KNOWN, rules
from vram_detective.engines.sglang.settings import from_values, resolve

H100 = 81559  # nvidia-smi memory.total, MiB
RTX_4090 = 24564


def _defaults(version, gpu_mib, **values):
    s = resolve(from_values(values), version, gpu_mib)
    return s.mem_fraction_static, s.chunked_prefill_size, s.cuda_graph_max_bs


def test_newest_known_is_0_5_23():
    assert NEWEST_KNOWN == (0, 5, 23) and rules(None).version == (0, 5, 23)


@pytest.mark.parametrize("version,expected", [
    # 2048 x 1.5 + 512 + 24 x 2 + 128 + 42 piecewise sizes up to 2048 x 8 = 4096 MiB: 20468 / 24564
    ("0.5.19", (0.833, 2048, 24)),
    # 0.5.20 memory_hook.py: 4096 x 1.5 + 512 + 48 x 2 + 128 + 50 sizes up to 4096 x 8 = 7280 MiB: 17284 / 24564
    ("0.5.20", (0.704, 4096, 48)),
])
def test_rtx_4090_tier_grows_in_0_5_20(version, expected):
    assert _defaults(version, RTX_4090) == expected


def test_rtx_4090_tier_tp4_in_0_5_20():
    assert _defaults("0.5.19", RTX_4090, tp_size=4)[1:] == (2048, 80)
    assert _defaults("0.5.20", RTX_4090, tp_size=4)[1:] == (4096, 160)


@pytest.mark.parametrize("version,mfs", [
    # H100, EAGLE: 512 + 12288 + 512 + 128 + 58 x 8 = 13904, + 4096 EAGLE reserve = 18000 MiB: 63559 / 81559
    ("0.5.13", 0.779),
    # 0.5.14: the speculative reserve is gone (the draft's KV is in the cell): 67655 / 81559
    ("0.5.14", 0.830),
])
def test_speculative_reserve_dropped_in_0_5_14(version, mfs):
    assert _defaults(version, H100, speculative_algorithm="EAGLE")[0] == mfs


@pytest.mark.parametrize("version,cell", [
    ("0.5.13", 131072),  # Llama-3.1-8B: 8 heads x 128 x 2 x 32 layers x 2 B
    ("0.5.14", 135168),  # one EAGLE draft layer: x (1 + 1/32)
])
def test_draft_kv_in_the_cell_from_0_5_14(version, cell):
    assert cell_with_draft(131072, 32, 1, rules(version)) == cell


@pytest.mark.parametrize("version,mfs", [
    # --disable-cuda-graph (no piecewise either): 512 + 12288 + 256 x 2 + 128 = 13440 MiB: 68119 / 81559
    ("0.5.14", 0.835),
    # 0.5.15: no decode-graph term when decode graphs are disabled: 12928 MiB: 68631 / 81559
    ("0.5.15", 0.841),
])
def test_graph_reserve_skipped_when_disabled_from_0_5_15(version, mfs):
    assert _defaults(version, H100, disable_cuda_graph=True)[0] == mfs


@pytest.mark.parametrize("version,mfs", [
    ("0.5.12", 0.830),  # 58 piecewise sizes up to 8192: 13904 MiB
    ("0.5.13", 0.831),  # clamped to --context-length 2048: 42 sizes, 13776 MiB: 67783 / 81559
    ("0.5.17", 0.830),  # clamp removed again
])
def test_piecewise_sizes_clamped_to_context_0_5_13_to_0_5_16(version, mfs):
    assert _defaults(version, H100, context_length=2048)[0] == mfs


@pytest.mark.parametrize("version,bs,mfs", [
    ("0.5.21", 256, 0.830),  # 13904 MiB
    ("0.5.22", 16, 0.835),  # bs capped to 16: 512 + 12288 + 32 + 128 + 464 = 13424 MiB: 68135 / 81559
])
def test_graph_bs_capped_by_max_running_requests_from_0_5_22(version, bs, mfs):
    s = resolve(from_values({"max_running_requests": 16}), version, H100)
    assert (s.cuda_graph_max_bs, s.mem_fraction_static) == (bs, mfs)


@pytest.mark.parametrize("version,expected", [
    ("0.5.13", 2048),  # min(4096, request pool clamp(1000 / 131072 x 512, 2048, 4096))
    ("0.5.14", 500),  # min(4096, 1000 // 2)
])
def test_user_max_running_requests_cap_in_0_5_14(version, expected):
    assert max_running_requests(1000, 131072, rules(version), user_value=4096) == expected


def _prediction(tokens=992896, rest=136.36):
    return PoolPrediction(177.57, 162.30, rest, tokens, 68.18, 68.18, 2048, 40960, 0.31, 25.26)


@pytest.mark.parametrize("version,line", [
    ("0.5.12", "KV Cache is allocated. #tokens: 992896, K size: 68.18 GB, V size: 68.18 GB"),
    ("0.5.13", "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 992896, K size: 68.18 GB, V size: 68.18 GB"),
])
def test_kv_line_names_the_dtype_from_0_5_13(version, line):
    assert line in log_lines(_prediction(), version)


@pytest.mark.parametrize("version,line", [
    ("0.5.9", "Load weight end. elapsed=T s, type=Model, dtype=torch.bfloat16, avail mem=162.30 GB, mem usage=15.27 GB."),
    ("0.5.10", "Load weight end. elapsed=T s, type=Model, avail mem=162.30 GB, mem usage=15.27 GB."),
])
def test_load_end_drops_dtype_in_0_5_10(version, line):
    assert line in log_lines(_prediction(), version)


@pytest.mark.parametrize("version,last", [
    ("0.5.13", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."),
    # rest = 12.25 - 137.9 x (1 - 0.88) = -4.30 GiB
    ("0.5.14", "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.88."),
])
def test_refusal_when_weights_leave_no_rest_from_0_5_14(version, last):
    p = PoolPrediction(137.9, 12.25, 12.25 - 137.9 * 0.12, 0, 0.0, 0.0, 0, 0, 0.0, 0.0)
    assert log_lines(p, version)[-1] == last


def test_parser_reads_labelled_swa_lines_of_0_5_17():
    got = parse_log("Full KV Cache is allocated. dtype: torch.bfloat16, #tokens: 56320, K size: 5.40 GB, V size: 5.40 GB\n"
                    "SWA KV Cache is allocated. dtype: torch.bfloat16, #tokens: 70656, K size: 0.68 GB, V size: 0.68 GB\n"
                    "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=[1, 2], "
                    "avail mem=73.10 GB")
    assert (got["kv_cache_tokens"], got["swa_kv_cache_tokens"], got["swa_k_size_gb"]) == (56320, 70656, 0.68)
    assert got["decode_graph_begin_avail_mem_gb"] == 73.10
    assert rules("0.5.17")["log_kv_swa_labels"] and not rules("0.5.16")["log_kv_swa_labels"]
