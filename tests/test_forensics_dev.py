"""The parser over the whole real-log corpus (groundtruth/dev.jsonl, engine lines only): every `log` parses, and every
figure in its `observed` object comes back equal, except the figures a case's author took from somewhere
other than a vLLM line (listed below with the reason). `score --from-logs` gives the same report."""
from __future__ import annotations

import json

import pytest

from vram_detective.engines.vllm.logs.reader import observed_from_log, parse_text
from vram_detective.scoring import score_cases

@pytest.fixture(autouse=True)
def _no_network(monkeypatch):
    """The scorer resolves models outside the catalog through the Hub: keep these tests off the network."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


# case id -> (figures that are not in the log's vLLM lines, why)
NOT_IN_THE_LOG = {
    "seed-int4-7b-rtx4090": (("nvidia_smi_used_mib",), "the story's 'about 10 GB' in nvidia-smi, not a log line"),
    "vllm-43308-gemma4-31b-awq-a100-v0200": (("kv_cache_gib", "kv_cache_tokens"),
                                             "approximate values from the user's comparison table and prose"),
    "vllm-43308-gemma4-31b-awq-a100-v0210": (("kv_cache_gib", "kv_cache_tokens"),
                                             "approximate values from the user's comparison table and prose"),
    "vllm-pr38479-qwen3-4b-h100-baseline": (("kv_cache_tokens",), "a summary table of the PR, not a log line"),
    "vllm-pr38479-qwen3-4b-h100-turboquant3": (("kv_cache_tokens",), "a summary table of the PR, not a log line"),
    "sparkvllm-396-minimax-m27-awq-2xgb10-085": (
        ("kv_cache_gib", "kv_cache_tokens", "max_concurrency", "max_concurrency_tokens"),
        "the reporter's one-line paraphrase of the log"),
    "miaai-dsv4flash-4-gb10-mbt8224": (("activation_peak_gib", "kv_cache_tokens"), "the reporter's results table"),
    "miaai-dsv4flash-4-gb10-mbt2048": (("activation_peak_gib", "kv_cache_tokens"), "the reporter's results table"),
    "miaai-glm53flash-204-2xgb10-armB": (("kv_cache_gib",), "the reporter's results table"),
    "vllm-51041-dsv4-flash-0731-h20-tp2-title": (("kv_cache_gib", "kv_cache_tokens"), "the issue title (rounded)"),
    "recipes-762-dsv4-flash-0731-b200-tp8": (("max_concurrency",), "quoted in prose"),
    "recipes-762-dsv4-flash-0731-b200-dp8": (("max_concurrency",), "quoted in prose"),
    "file57428438798-qwen25-7b-awq-rtx4080-wsl-v0260": (
        ("total_gpu_memory_gib", "requested_memory_gib", "weights_gib", "non_torch_gib", "activation_peak_gib",
         "cuda_graph_gib"), "the user's own arithmetic sentence reconciling the 'Free memory' line (not quoted)"),
    "file56155919944-qwen3-8b-fp8-rtx5070ti-v0230": (("weights_gib", "kv_cache_gib", "max_concurrency"),
                                                     "the author's results table"),
    "file56155919944-qwen3-30b-a3b-nvfp4-rtx5070ti-fail": (("weights_gib", "startup_failed"),
                                                            "the author's results table"),
    "file60168338778-qwen3-14b-awq-l40s-v0280": (("weights_gib", "kv_cache_gib", "kv_cache_tokens", "max_concurrency"),
                                                 "the author's FP16-vs-AWQ table"),
    "file60168338778-qwen3-14b-awq-l4-single-v0280": (("kv_cache_gib", "kv_cache_tokens", "max_concurrency"),
                                                      "the author's KV table"),
    "file60168338778-qwen3-14b-awq-l4-tp2-v0280": (("kv_cache_gib", "kv_cache_tokens", "max_concurrency"),
                                                   "the author's KV table"),
    "file60168338778-qwen3-14b-awq-l4-pp2-v0280": (("kv_cache_gib", "kv_cache_tokens", "max_concurrency"),
                                                   "the author's KV table"),
    "vllm-10797-llama32-3b-rtx4080-util1": (("startup_failed",), "the failed start is in the issue title only"),
    "file54377340947-mistral7b-v02-lora-rtxpro6000-runpod": (("startup_failed",),
                                                             "the crash during graph capture is after the excerpt"),
    "samilazrak-vllm-lab-qwen3-14b-awq-l40s-v0290": (("weights_gib", "kv_cache_gib", "kv_cache_tokens",
                                                      "max_concurrency"), "the README's table"),
    "oreilly-ch9-qwen3-14b-awq-book": (("weights_gib", "kv_cache_tokens"), "the reproduction's comparison table"),
    "file28022205292-gptoss20b-h100-16k": (("requested_memory_gib", "non_torch_gib", "activation_peak_gib",
                                            "cuda_graph_gib"), "the author's transcription table"),
    "file28022205292-qwen3-32b-h100-tp1-16k": (
        ("total_gpu_memory_gib", "requested_memory_gib", "weights_gib", "non_torch_gib", "activation_peak_gib",
         "kv_cache_gib", "cuda_graph_gib"), "the author's transcription table"),
    "file28022205292-qwen3-32b-h100-tp1-32k-fail": (
        ("total_gpu_memory_gib", "requested_memory_gib", "weights_gib", "non_torch_gib", "activation_peak_gib",
         "startup_failed"), "the author's transcription table"),
    "lmcache-pr1769-qwen3-32b-tp2-h100": (("kv_cache_gib", "kv_cache_tokens", "max_concurrency",
                                           "max_concurrency_tokens"), "a documentation table"),
    "vllm-30919-gptoss120b-tp8-b200-fp8kv": (("startup_failed",), "the NotImplementedError is after the excerpt"),
    "vllm-17242-dsr1-tp16-2x8h20-v084": (("startup_failed",), "the segmentation fault is after the excerpt"),
    "vllm-26833-gptoss120b-tp2-2xh100-util090-oom": (("startup_failed",),
                                                     "the OOM at 0.9 is implied by the prose about the 0.8 run"),
    # nvidia-smi figures and failures the reporter wrote in a sentence or a table (not kept in the repo's log)
    "vllm-7553-yi15-34b-4x4090-cudagraph": (("nvidia_smi_used_mib", "nvidia_smi_total_mib"),
                                            "the reporter's sentence about nvidia-smi"),
    "vllm-7553-yi15-34b-4x4090-eager": (("nvidia_smi_used_mib", "nvidia_smi_total_mib"),
                                        "the reporter's sentence about nvidia-smi"),
    "vllm-15617-r1-distill-llama70b-8x4090-v082": (("nvidia_smi_total_mib",), "the reporter's sentence"),
    "file70682754770-llama31-8b-a100-80-v0310": (("nvidia_smi_used_mib",), "the user's note on nvidia-smi"),
    "samilazrak-vllm-lab-qwen3-14b-base-l40s-v0290": (("nvidia_smi_total_mib",), "the README's table"),
    "vllm-26833-gptoss120b-tp2-2xh100-util080-ok": (("nvidia_smi_used_mib", "nvidia_smi_total_mib"),
                                                    "the reporter's sentence about nvidia-smi"),
}
# cases whose log holds several runs and whose figures are not the first run's: case id -> run index
OTHER_RUN = {"vllm-pr2031-llama2-7b-a100-80-pr": 1}


def test_every_dev_log_parses_and_its_figures_come_back(dev_cases):
    equal = checked = 0
    mismatches = []
    for case in dev_cases.values():
        parsed = parse_text(case["log"])
        got = parsed.runs[OTHER_RUN.get(case["id"], 0)].observed()
        unrecoverable = NOT_IN_THE_LOG.get(case["id"], ((), ""))[0]
        for key, value in case["observed"].items():
            checked += 1
            if got.get(key) == value and type(got.get(key)) is type(value):
                equal += 1
            elif key not in unrecoverable:
                mismatches.append((case["id"], key, value, got.get(key)))
    print(f"\ndev.jsonl: {equal}/{checked} figures equal ({equal / checked:.1%}); the other "
          f"{checked - equal} are listed in NOT_IN_THE_LOG")
    assert mismatches == []


def test_the_exception_list_is_honest(dev_cases):
    """Each listed figure really is missing or different, and every other figure of those cases is equal."""
    for case_id, (keys, reason) in NOT_IN_THE_LOG.items():
        case = dev_cases[case_id]
        assert reason
        got = observed_from_log(case["log"])
        for key in keys:
            assert got.get(key) != case["observed"][key], (case_id, key)


def test_extra_figures_do_not_contradict_the_cases(dev_cases):
    """Figures the parser finds that a case does not record are only ones the case left out on purpose."""
    extra = {}
    for case in dev_cases.values():
        if case["id"] in OTHER_RUN or case["id"] in NOT_IN_THE_LOG:
            continue
        got = observed_from_log(case["log"])
        more = sorted(set(got) - set(case["observed"]))
        if more:
            extra[case["id"]] = more
    assert extra == {}


def test_several_runs_in_one_case_log(dev_cases):
    parsed = parse_text(dev_cases["vllm-pr2031-llama2-7b-a100-80-main"]["log"])
    assert [run.observed() for run in parsed.runs] == [{"num_gpu_blocks": 7449}, {"num_gpu_blocks": 7351}]
    # the two releases were the reporter's labels ('- vLLM 0.2.3: `# GPU blocks: ...`'), not log lines
    two_versions = parse_text(dev_cases["vllm-2136-codellama13b-2x4090-v023"]["log"])
    assert [run.observed() for run in two_versions.runs] == [{"num_gpu_blocks": 1464, "num_cpu_blocks": 1310}] * 2


@pytest.fixture
def reports(dev_cases):
    cases = [case for case in dev_cases.values() if case["id"] not in NOT_IN_THE_LOG and case["id"] not in OTHER_RUN]
    return score_cases(cases), score_cases(cases, from_logs=True)


def test_score_from_logs_gives_the_same_report(reports):
    from_observed, from_logs = reports
    assert json.dumps(from_logs, sort_keys=True) == json.dumps(from_observed, sort_keys=True)
    assert from_observed["vllm"]["scored"] > 60


def test_score_from_logs_differs_only_in_the_listed_cases(dev_cases):
    cases = list(dev_cases.values())
    plain = {entry["id"]: entry for entry in score_cases(cases)["vllm"]["per_case"]}
    logs = {entry["id"]: entry for entry in score_cases(cases, from_logs=True)["vllm"]["per_case"]}
    differ = {case_id for case_id in set(plain) | set(logs) if plain.get(case_id) != logs.get(case_id)}
    assert differ <= set(NOT_IN_THE_LOG) | set(OTHER_RUN)
