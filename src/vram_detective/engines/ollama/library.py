"""An Ollama library name that is not in the local store ("qwen2.5:7b" before `ollama pull`): the same answer
from the built-in catalog, the checkpoint the library's tag was converted from, at the tag's quantization.

A library tag is <model>:<size>[-<variant>][-<quant>] (ollama.com/library/<model>/tags): the size picks the
checkpoint, "text" the base model where the catalog has one, an explicit quant suffix ("-q8_0", "-fp16") the
GGUF type; without one the tag is the library's default file, whose type is the model's default below. A name
outside this table (another namespace, a model the catalog lacks) stays the store's answer: not pulled."""
from __future__ import annotations

import re
from dataclasses import dataclass

# Ollama library model -> (its sizes -> the catalog's instruct checkpoint, the size `latest` is, the default
# tag's GGUF type, where that type was read). Only llama3.1 and qwen3 are measured: the real Ollama logs of the
# ground truth print the default tag's file type (groundtruth/dev-llamacpp.jsonl: llama3.1:8b "model ftype = Q4_0"
# in a 2024-08 pull, qwen3:4b Q4_K_M). The others are the library's listed defaults, not checked here (no pull and
# no network when they were written): the answer says so, and a pull sizes the real file.
UNCHECKED = "the library's listed default for this tag, not checked against a pull"

LIBRARY: dict[str, tuple[dict[str, str], str, str, str]] = {
    "qwen2.5": ({"0.5b": "Qwen/Qwen2.5-0.5B-Instruct", "1.5b": "Qwen/Qwen2.5-1.5B-Instruct",
                 "3b": "Qwen/Qwen2.5-3B-Instruct", "7b": "Qwen/Qwen2.5-7B-Instruct", "14b": "Qwen/Qwen2.5-14B-Instruct",
                 "32b": "Qwen/Qwen2.5-32B-Instruct", "72b": "Qwen/Qwen2.5-72B-Instruct"}, "7b", "Q4_K_M",
                UNCHECKED),
    "qwen2.5-coder": ({"7b": "Qwen/Qwen2.5-Coder-7B-Instruct", "14b": "Qwen/Qwen2.5-Coder-14B-Instruct",
                       "32b": "Qwen/Qwen2.5-Coder-32B-Instruct"}, "7b", "Q4_K_M", UNCHECKED),
    "qwen3": ({"0.6b": "Qwen/Qwen3-0.6B", "4b": "Qwen/Qwen3-4B", "8b": "Qwen/Qwen3-8B", "14b": "Qwen/Qwen3-14B",
               "32b": "Qwen/Qwen3-32B", "30b": "Qwen/Qwen3-30B-A3B", "235b": "Qwen/Qwen3-235B-A22B"}, "8b", "Q4_K_M",
              "an Ollama log of qwen3:4b (model ftype Q4_K_M)"),
    "qwq": ({"32b": "Qwen/QwQ-32B"}, "32b", "Q4_K_M", UNCHECKED),
    "llama3.1": ({"8b": "meta-llama/Llama-3.1-8B-Instruct", "70b": "meta-llama/Llama-3.1-70B-Instruct",
                  "405b": "meta-llama/Llama-3.1-405B-Instruct"}, "8b", "Q4_0",
                 "an Ollama log of llama3.1:8b pulled in 2024-08 (model ftype = Q4_0)"),
    "llama3.2": ({"1b": "meta-llama/Llama-3.2-1B-Instruct", "3b": "meta-llama/Llama-3.2-3B-Instruct"}, "3b", "Q4_K_M",
                 UNCHECKED),
    "llama3.3": ({"70b": "meta-llama/Llama-3.3-70B-Instruct"}, "70b", "Q4_K_M", UNCHECKED),
    "llama3": ({"8b": "meta-llama/Meta-Llama-3-8B-Instruct", "70b": "meta-llama/Meta-Llama-3-70B-Instruct"}, "8b",
               "Q4_0", UNCHECKED),
    "mistral": ({"7b": "mistralai/Mistral-7B-Instruct-v0.3"}, "7b", "Q4_0", UNCHECKED),
    "mistral-nemo": ({"12b": "mistralai/Mistral-Nemo-Instruct-2407"}, "12b", "Q4_0",
                     UNCHECKED),
    "mixtral": ({"8x7b": "mistralai/Mixtral-8x7B-Instruct-v0.1"}, "8x7b", "Q4_0", UNCHECKED),
    "gemma2": ({"2b": "google/gemma-2-2b-it", "9b": "google/gemma-2-9b-it", "27b": "google/gemma-2-27b-it"}, "9b",
               "Q4_0", UNCHECKED),
    "phi4": ({"14b": "microsoft/phi-4"}, "14b", "Q4_K_M", UNCHECKED),
    "deepseek-r1": ({"1.5b": "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "7b": "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
                     "8b": "deepseek-ai/DeepSeek-R1-0528-Qwen3-8B", "14b": "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B",
                     "32b": "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "70b": "deepseek-ai/DeepSeek-R1-Distill-Llama-70B"},
                    "8b", "Q4_K_M", UNCHECKED),
    "deepseek-coder-v2": ({"16b": "deepseek-ai/DeepSeek-Coder-V2-Lite-Instruct"}, "16b", "Q4_0",
                          UNCHECKED),
}

# the base checkpoint of a "-text" tag, where the catalog has it
BASE = {"Qwen/Qwen2.5-0.5B-Instruct": "Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-1.5B-Instruct": "Qwen/Qwen2.5-1.5B",
        "Qwen/Qwen2.5-3B-Instruct": "Qwen/Qwen2.5-3B", "Qwen/Qwen2.5-7B-Instruct": "Qwen/Qwen2.5-7B",
        "Qwen/Qwen2.5-14B-Instruct": "Qwen/Qwen2.5-14B", "Qwen/Qwen2.5-32B-Instruct": "Qwen/Qwen2.5-32B",
        "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Llama-3.1-8B",
        "meta-llama/Llama-3.1-70B-Instruct": "meta-llama/Llama-3.1-70B",
        "meta-llama/Llama-3.2-1B-Instruct": "meta-llama/Llama-3.2-1B",
        "meta-llama/Llama-3.2-3B-Instruct": "meta-llama/Llama-3.2-3B",
        "meta-llama/Meta-Llama-3-8B-Instruct": "meta-llama/Meta-Llama-3-8B",
        "meta-llama/Meta-Llama-3-70B-Instruct": "meta-llama/Meta-Llama-3-70B",
        "google/gemma-2-2b-it": "google/gemma-2-2b", "google/gemma-2-9b-it": "google/gemma-2-9b",
        "google/gemma-2-27b-it": "google/gemma-2-27b"}

# a tag's quantization suffix as Ollama names its files -> llama.cpp's type name
_QUANT = re.compile(r"^(?:q[2-8]_[01]|q[2-6]_k(?:_[sml])?|iq[1-4]_(?:xxs|xs|s|m|nl)|fp16|bf16|f16|f32)$")
_FLOATS = {"fp16": "F16", "f16": "F16", "bf16": "BF16", "f32": "F32"}


@dataclass(frozen=True)
class LibraryTag:
    """A library name answered from the catalog: which checkpoint, at which llama.cpp type, and why. It stands
    where a stored model's GGUF table would (format "gguf-mix": no file, the quantizer's mix of that type)."""

    name: str  # as given: "qwen2.5:7b"
    repo_id: str  # the catalog's checkpoint
    gguf_type: str  # "Q4_K_M"
    basis: str  # where the type was read
    why: str  # why the store did not answer: "it is not in the Ollama store (~/.ollama/models)"
    format: str = "gguf-mix"

    @property
    def metadata(self) -> dict:
        return {}

    @property
    def note(self) -> str:
        return (f"{self.name}: {self.why}; sized from the built-in catalog's "
                f"{self.repo_id} at the tag's quantization {self.gguf_type} (llama.cpp's {self.gguf_type} mix, "
                f"{self.basis}); `ollama pull {self.name}` and ask again to size the file itself")


def library_tag(name: str, why: str) -> LibraryTag | None:
    """The catalog's answer for an Ollama library name, or None when the name is not one this table knows."""
    from .store import DEFAULT_HOST, DEFAULT_NAMESPACE, OllamaStoreError, name_parts

    try:
        host, namespace, model, tag = name_parts(name)
    except OllamaStoreError:
        return None
    if (host, namespace) != (DEFAULT_HOST, DEFAULT_NAMESPACE) or model.lower() not in LIBRARY:
        return None
    sizes, latest, default_type, basis = LIBRARY[model.lower()]
    words = tag.lower().split("-")
    size = latest if words[0] == "latest" else words[0]
    rest = words[1:]
    gguf_type = default_type
    if rest and _QUANT.match(rest[-1]):
        quant = rest.pop()
        gguf_type, basis = _FLOATS.get(quant, quant.upper()), "the tag's own suffix"
    if size not in sizes or any(word not in ("instruct", "text", "it", "chat") for word in rest):
        return None
    repo = sizes[size]
    if "text" in rest:
        if repo not in BASE:
            return None
        repo = BASE[repo]
    return LibraryTag(name, repo, gguf_type, basis, why)
