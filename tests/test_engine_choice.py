"""Issue 23: the engine comes from the inputs, the same on the command line and in the web page's field; a flag
of another engine than the chosen one is bad input naming the right engine, never ignored."""
from __future__ import annotations

import json

import pytest

from tests.test_sources_gguf import write_gguf
from tests.web_server import running_server
from vram_detective.cli import main
from vram_detective.engine_choice import canonical, choose, line_engine, model_engine


def _explain(capsys, *argv: str) -> tuple[int, dict | None, str]:
    code = main(["explain", *argv, "--json"])
    out = capsys.readouterr()
    return code, json.loads(out.out) if out.out.strip() else None, out.err.strip()


@pytest.mark.parametrize("line, engine", [
    ("vllm serve Qwen/Qwen3-8B", "vllm"),
    ("python -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-8B", "vllm"),
    ("python -m sglang.launch_server --model-path Qwen/Qwen3-8B", "sglang"),
    ("sglang serve --model-path Qwen/Qwen3-8B", "sglang"),
    ("llama-server -m Qwen/Qwen3-8B -ngl 99", "llamacpp"),
    ("python -m llama_cpp.server --model Qwen/Qwen3-8B", "llamacpp"),
    ("OLLAMA_KV_CACHE_TYPE=q8_0 ollama run qwen2.5:7b", "ollama"),
])
def test_a_pasted_line_means_its_program(line, engine):
    assert line_engine(line.split()) == engine


@pytest.mark.parametrize("line, engine, size", [
    ("python -m sglang.launch_server --model-path Qwen/Qwen3-8B --mem-fraction-static 0.8", "sglang", None),
    ("sglang serve --model-path Qwen/Qwen3-8B", "sglang", None),
    ("llama-server -m Qwen/Qwen3-8B -c 8192 -ngl 99", "llamacpp", 8192),
    ("python -m llama_cpp.server --model Qwen/Qwen3-8B --n_ctx 4096", "llamacpp", 4096),
])
def test_a_pasted_line_on_the_cli_and_in_the_web_field(capsys, line, engine, size):
    """Was (web): 'no model given' for SGLang, "unknown model 'llama-server'", "unexpected word 'serve'"."""
    code, out, err = _explain(capsys, "--gpu", "H100", "--", *line.split())
    assert (code, err, out["engine_name"]) == (0, "", engine)
    if size:
        assert out["kv_cache_tokens"] == size
    import urllib.parse
    import urllib.request

    with running_server() as (base, _):
        query = urllib.parse.urlencode({"line": line, "gpu": "H100", "engine": "vllm"})  # the picker's default
        with urllib.request.urlopen(f"{base}/api/explain?{query}", timeout=120) as answer:
            body = json.loads(answer.read())
    assert body == out


def test_a_gguf_file_means_llamacpp(tmp_path, capsys):
    path = write_gguf(tmp_path / "m.gguf")[0]
    code, out, err = _explain(capsys, str(path), "--gpu", "4090")
    assert (code, out["engine_name"]) == (0, "llamacpp")
    assert model_engine("./Qwen3-8B-Q4_K_M.gguf") == "llamacpp"


def test_an_ollama_tag_means_ollama():
    assert model_engine("qwen2.5:7b") == "ollama" and model_engine("library/llama3.1:8b-instruct-q4_K_M") == "ollama"
    assert model_engine("Qwen/Qwen3-8B") is None  # a Hub repo id has no tag
    assert choose(None, "qwen2.5:7b")[0] == "ollama"


def test_llamacpp_flags_mean_llamacpp(capsys):
    """Was: vLLM predicted, 'all settings at this release's defaults', exit 0 (-ngl and -c ignored)."""
    code, out, err = _explain(capsys, "Qwen/Qwen3-8B", "--gpu", "4090", "--gguf-type", "Q4_K_M", "-ngl", "99",
                              "-c", "4096", "-ctk", "q8_0")
    assert (code, out["engine_name"], out["kv_cache_tokens"]) == (0, "llamacpp", 4096)
    assert out["settings"]["type_k"]["value"] == "q8_0"
    code, out, _ = _explain(capsys, "Qwen/Qwen3-8B", "--gpu", "H100", "--mem-fraction-static", "0.8")
    assert (code, out["engine_name"], out["sglang"]["mem_fraction_static"]) == (0, "sglang", 0.8)


@pytest.mark.parametrize("argv, message", [
    (["--engine", "vllm", "-ngl", "99"], "-ngl is llama.cpp's flag, not vLLM's: use --engine llamacpp"),
    (["--engine", "vllm", "--mem-fraction-static", "0.8"],
     "--mem-fraction-static is SGLang's flag, not vLLM's: use --engine sglang"),
    (["--engine", "llamacpp", "--max-model-len", "4096"], "--max-model-len is vLLM's flag, not llama.cpp's"),
    (["--engine", "sglang", "--", "vllm", "serve", "Qwen/Qwen3-8B"],
     "the launch line starts vLLM, not SGLang: use --engine vllm"),
])
def test_a_flag_of_another_engine_is_exit_2_naming_it(capsys, argv, message):
    cut = argv.index("--") if "--" in argv else len(argv)
    model = [] if "--" in argv else ["Qwen/Qwen3-8B"]
    code = main(["explain", *model, "--gpu", "4090", *argv[:cut], *argv[cut:]])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and err.count("\n") == 0


def test_sglang_reads_vllms_names_for_its_own_settings(capsys):
    code, out, _ = _explain(capsys, "Qwen/Qwen3-8B", "--gpu", "H100", "--engine", "sglang", "--max-model-len", "8192")
    assert (code, out["max_model_len"]) == (0, 8192)


def test_sglangs_own_parallel_flags_on_the_command_line(capsys):
    """Was: `--tp 2 --pp-size 2` refused as unrecognized (their flag also had vLLM's --tensor-parallel-size name,
    so all of its names were dropped); now each name another engine has not taken stays SGLang's."""
    code, out, err = _explain(capsys, "Qwen/Qwen3-32B", "--gpu", "4090", "--tp", "2", "--pp-size", "2")
    code_line, line, _ = _explain(capsys, "--gpu", "4090", "--", "python", "-m", "sglang.launch_server",
                                  "--model-path", "Qwen/Qwen3-32B", "--tp-size", "2", "--pp", "2")
    assert (code, code_line, out["engine_name"]) == (0, 0, "sglang"), err
    assert out == line and len(out["devices"]) == 4
    assert (out["settings"]["tp_size"]["value"], out["settings"]["pp_size"]["value"]) == (2, 2)
    code = main(["explain", "Qwen/Qwen3-8B", "--gpu", "H100", "--engine", "vllm", "--tp", "2"])
    assert code == 2 and "--tp is SGLang's flag, not vLLM's" in capsys.readouterr().err


@pytest.mark.parametrize("spelling", ["llama.cpp", "llama-cpp", "LlamaCpp", "llamacpp"])
def test_llamacpp_spellings(capsys, spelling):
    assert canonical(spelling) == "llamacpp"
    code, out, _ = _explain(capsys, "Qwen/Qwen3-8B", "--gpu", "4090", "--engine", spelling, "-c", "4096")
    assert (code, out["engine_name"]) == (0, "llamacpp")


def test_names_say_what_they_are():
    """`--engine-version` is the engine's release (args.engine_version, whatever the engine), vLLM's V0/V1 is
    args.vllm_path (`--vllm-engine`, or the old `--engine v0|v1` at the edge only)."""
    from vram_detective.cli import build_parser, normalize_engine_args

    own = ["explain", "Qwen/Qwen3-8B", "--engine", "sglang", "--engine-version", "0.5.11"]
    args = build_parser().parse_args(own)
    normalize_engine_args(args, own)
    assert (args.engine_name, args.engine_version, args.vllm_path) == ("sglang", "0.5.11", None)
    assert not hasattr(args, "vllm_version") and not hasattr(args, "engine")
    own = ["explain", "Qwen/Qwen3-8B", "--engine", "v0", "--vllm-version", "0.8.5"]
    args = build_parser().parse_args(own)
    normalize_engine_args(args, own)
    assert (args.engine_name, args.engine_version, args.vllm_path) == ("vllm", "0.8.5", "v0")
