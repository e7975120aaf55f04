"""Issue 31, reads outside what was named: the Ollama store trusted nothing it reads (names, digests, manifest
sizes and shapes), and the web server reads local files only under --allow-local-models whatever reader a
request reaches (model directories, GGUF, --mmproj, the Ollama store), symlinks resolved first, with one message
whether or not the path exists. Through the command line (a subprocess) and a real server on loopback."""
from __future__ import annotations

import json
import os
import urllib.parse

import pytest

from test_hostile_regressions import _cli
from test_hostile_web import _safetensors_model, request
from test_ollama import _store
from web_server import running_server

from vram_detective.read_policy import NOT_ALLOWED

HEX = "ab" * 32


def _explain(name: str, store, **env):
    return _cli("explain", name, "--engine", "ollama", "--gpu", "4090", timeout=60,
                env={"OLLAMA_MODELS": str(store), **env})


def _rewrite(manifest, change) -> None:
    data = json.loads(manifest.read_text())
    change(data)
    manifest.write_text(json.dumps(data))


def test_a_stored_model_still_loads(tmp_path):
    _store(tmp_path)
    outcome = _explain("tiny:q4", tmp_path)
    assert outcome.code == 0, outcome.err


@pytest.mark.parametrize("digest", ["/etc/passwd", "../../../etc/passwd", "sha256:" + HEX[:-2], "sha256:" + HEX.upper(),
                                    "sha512:" + HEX, 17, None])
def test_a_layer_digest_ollama_would_refuse_is_refused(tmp_path, digest):
    """A manifest's digest named the blob's path: '/etc/passwd' or '../..' read any file, a GGUF outside the
    store was loaded (exit 0). Ollama takes sha256[:-] and 64 hex digits only."""
    manifest = _store(tmp_path)
    _rewrite(manifest, lambda data: data["layers"][0].update(digest=digest))
    outcome = _explain("tiny:q4", tmp_path)
    assert outcome.code == 2, outcome.err
    assert "is not sha256:<64 hex digits>" in outcome.one_line()


@pytest.mark.parametrize("name", ["registry.ollama.ai/../../../etc/passwd:x", "lib/..:7b", "a/b/c/d/e:1",
                                  "a" * 300 + ":7b", "qwen:" + "t" * 300, "q$n:7b"])
def test_a_name_ollama_would_refuse_is_exit_2(tmp_path, name):
    """'registry.ollama.ai/../..' escaped the store; a 255+ character name was Python's '[Errno 36] File name too
    long'."""
    _store(tmp_path)
    outcome = _explain(name, tmp_path)
    assert outcome.code == 2, outcome.err
    assert "is not an Ollama model name" in outcome.one_line()


@pytest.mark.parametrize("change, words", [
    (lambda data: data.update(layers="x"), "layers are not a list of objects"),
    (lambda data: data.update(layers=[1, 2]), "layers are not a list of objects"),
    (lambda data: data.update(layers={"a": 1}), "layers are not a list of objects"),
    (lambda data: data.pop("layers"), "layers are not a list of objects"),
    (lambda data: data["layers"][0].pop("digest"), "is not sha256"),
    (lambda data: data["layers"][0].update(mediaType=["x"]), "has no application/vnd.ollama.image.model layer"),
])
def test_malformed_manifests_are_exit_2(tmp_path, change, words):
    manifest = _store(tmp_path)
    _rewrite(manifest, change)
    outcome = _explain("tiny:q4", tmp_path)
    assert outcome.code == 2, outcome.err
    assert words in outcome.one_line()


@pytest.mark.parametrize("text, words", [("[1, 2]", "not a JSON object"), ("{" * 100 + "}" * 100, "nested deeper"),
                                         ("not json", "not valid JSON")])
def test_a_manifest_that_is_not_an_object_is_exit_2(tmp_path, text, words):
    manifest = _store(tmp_path)
    manifest.write_text(text)
    outcome = _explain("tiny:q4", tmp_path)
    assert outcome.code == 2, outcome.err
    assert "manifest" in outcome.one_line()


def test_a_huge_manifest_is_refused_without_reading_it(tmp_path):
    """A 1 GiB manifest took 2 GiB in the CLI: a manifest is a few KiB, read through the bounded JSON reader
    (which reads at most its limit + 1 bytes: the size in the message is that, not the file's)."""
    manifest = _store(tmp_path)
    with open(manifest, "r+b") as handle:
        handle.truncate(1 << 30)  # 1 GiB of zeros (sparse where the file system holds holes)
    outcome = _explain("tiny:q4", tmp_path)
    assert outcome.code == 2, outcome.err
    assert outcome.one_line() == ("vram-detective: error: tiny:q4: manifest: 1,048,577 bytes, over the 1,048,576-byte "
                                  "limit for this file")


def test_no_home_directory_is_exit_2(monkeypatch, capsys):
    """No HOME, no password entry and no OLLAMA_MODELS: was 'internal error (RuntimeError: Could not determine
    home directory.)', exit 3. (In-process: a user without a password entry needs a Python it may run.)"""
    import pwd

    from vram_detective.cli import main
    from vram_detective.errors import run_guarded

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    for name in ("HOME", "OLLAMA_MODELS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    code = run_guarded(main, ["explain", "qwen2.5:7b", "--engine", "ollama", "--gpu", "4090"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip() == ("vram-detective: error: no home directory to find the Ollama store in: set OLLAMA_MODELS "
                           "to the store (the directory with manifests/ and blobs/)")


# --- the server ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def allowed(tmp_path_factory):
    """A server allowed one directory: `tiny` a real model inside, `outside` a real model outside, `linked` a
    symlink inside pointing to it, and `half` a model whose config.json is a symlink outside."""
    base = tmp_path_factory.mktemp("reads")
    _safetensors_model(base / "allowed" / "tiny")
    _safetensors_model(base / "outside")
    os.symlink(base / "outside", base / "allowed" / "linked")
    (base / "allowed" / "half").mkdir()
    os.symlink(base / "outside" / "config.json", base / "allowed" / "half" / "config.json")
    os.symlink(base / "outside" / "model.safetensors", base / "allowed" / "half" / "model.safetensors")
    with running_server("--allow-local-models", str(base / "allowed")) as (url, _):
        yield url, base


def _get(url: str, **params):
    return request(url, "/api/explain?" + urllib.parse.urlencode(params))


def test_a_model_under_the_directory_is_read(allowed):
    status, body = _get(allowed[0], model="tiny", gpu="H100")
    assert status == 200, body


@pytest.mark.parametrize("model", ["linked", "half"])
def test_a_symlink_out_of_the_directory_is_not_followed(allowed, model):
    status, body = _get(allowed[0], model=model, gpu="H100")
    assert status == 403, body
    assert NOT_ALLOWED in body["error"] and str(allowed[1]) not in body["error"]


@pytest.mark.parametrize("where", ["/etc/shadow", "/etc", "/nonexistent/x.gguf", "/proc/self/environ"])
def test_mmproj_outside_is_one_message_whatever_exists(allowed, where):
    """--mmproj opened any path, and its errors told whether the path existed, was a directory or unreadable."""
    for params in ({"mmproj": where}, {"line": f"llama-server -m x --mmproj {where}"}):
        status, body = _get(allowed[0], model="tiny", gpu="H100", engine="llamacpp", **params)
        assert (status, body["error"]) == (403, f"--mmproj: {NOT_ALLOWED}"), (params, body)


def test_the_ollama_store_is_not_read_unless_allowed(allowed):
    """engine=ollama read ~/.ollama and its errors named the home directory and which models were pulled. A
    library name is answered from the catalog (issue 27), saying the store was not read; another name:tag is
    refused as before."""
    status, body = _get(allowed[0], model="qwen2.5:7b", gpu="H100", engine="ollama")
    assert status == 200 and body["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert f"qwen2.5:7b: the Ollama store is {NOT_ALLOWED}; sized from the built-in catalog's" in body["notes"][1]
    assert str(allowed[1]) not in json.dumps(body) and ".ollama" not in json.dumps(body)
    status, body = _get(allowed[0], model="someone/private:7b", gpu="H100", engine="ollama")
    assert (status, body["error"]) == (403, f"someone/private:7b: the Ollama store is {NOT_ALLOWED}")
    assert _get(allowed[0], model="Qwen/Qwen3-8B", gpu="H100", engine="ollama")[0] == 200  # the catalog still


@pytest.mark.parametrize("model", ["nothing/here/at/all", "/etc/passwd", "/nonexistent", "../wt-hostile/src",
                                   "x.gguf", "src/../src/vram_detective"])
def test_paths_answer_alike_whether_they_exist(allowed, model):
    """403 vs 400 told a client whether a path existed relative to the server's working directory."""
    status, body = _get(allowed[0], model=model, gpu="H100")
    assert (status, body["error"]) == (403, f"{model}: {NOT_ALLOWED}")


@pytest.mark.parametrize("there, missing", [("src/vram_detective", "src/no_such_dir"),
                                            ("tests/conftest.py", "tests/no_such_file.py")])
def test_a_name_that_may_be_a_hub_id_answers_alike_whether_a_path_exists(allowed, there, missing):
    """One slash reads as a Hub id: the answer must not depend on a file of that name in the working directory."""
    got = [_get(allowed[0], model=model, gpu="H100") for model in (there, missing)]
    assert got[0][0] == got[1][0] == 400
    assert got[0][1]["error"].replace(there, "NAME") == got[1][1]["error"].replace(missing, "NAME")
