"""engines/llamacpp/galloc.py: ggml-alloc's rules on small graphs whose placement is worked out by hand
(ggml-alloc.c: inputs first, in-place reuse, frees once the last child ran, holes before the tail, alignment).
The replay over real graphs is checked against the real engine in tests/test_llamacpp_cpu_groundtruth.py."""
import json
from pathlib import Path

import pytest

from vram_detective.api import model_spec
from vram_detective.engines.llamacpp import galloc
from vram_detective.engines.llamacpp.compute import graph_dims
from vram_detective.engines.llamacpp.graph import F32, Graph, Tensor
from vram_detective.engines.llamacpp.graph_llm import Reserve, reserve_graph
from vram_detective.engines.llamacpp.plan import swa_layer_set


def _t(op, n, *src, view=None):
    return Tensor(op, F32, (n,), src, view_src=view)


def _input(n):
    t = Tensor("NONE", F32, (n,))
    t.input = True
    return t


def _reserve(out, **kw) -> int:
    g = Graph()
    g.expand(out)
    return galloc.reserve(g, **kw)


def test_an_inplace_op_takes_its_only_parents_bytes():
    x = _input(256)  # 1 KiB at 0, freed after a: a 1 KiB hole
    a = _t("MUL_MAT", 512, x)  # 2 KiB at 1 KiB
    b = _t("ADD", 512, a)  # a has one child and b's layout: b runs in a's bytes (else it would go to 3 KiB)
    assert _reserve(b) == 3072


def test_a_parent_with_two_children_is_not_reused():
    x = _input(256)  # 1 KiB at 0, freed after a
    a = _t("MUL_MAT", 256, x)  # 1 KiB at 1 KiB
    b = _t("ADD", 256, a)  # a has two children: b goes to the hole at 0
    c = _t("MUL_MAT", 256, b, a)  # no hole left: 2 KiB .. 3 KiB
    assert _reserve(c) == 3072


def test_freed_neighbours_merge_into_the_tail():
    x = _input(8)  # 32 bytes at 0, freed after big
    big = _t("MUL_MAT", 1024, x)  # 4 KiB at 32
    small = _t("MUL_MAT", 512, big)  # 2 KiB at 4128; big freed: the hole [0, 4128)
    again = _t("MUL_MAT", 256, small)  # 1 KiB in the hole at 0; small freed: [1024, 6176) joins the tail
    tail = _t("MUL_MAT", 2048, again)  # 8 KiB from 1024
    assert _reserve(tail) == 1024 + 8192


def test_sizes_are_padded_to_the_alignment():
    x = _input(3)  # 12 bytes, padded to 32
    a = _t("MUL_MAT", 5, x)  # 20 bytes at 32
    assert _reserve(a) == 64
    assert _reserve(a, alignment=64) == 128


def test_a_view_keeps_its_source_alive_until_the_views_children_ran():
    x = _input(256)  # 1 KiB at 0, two children
    a = _t("MUL_MAT", 256, x)  # 1 KiB at 1 KiB; its only child is a view
    v = _t("RESHAPE", 256, a, view=a)
    b = _t("MUL_MAT", 256, x)  # a is still viewed: 2 KiB .. 3 KiB (x freed after b)
    c = _t("MUL_MAT", 256, v, b)  # the hole x left, at 0
    assert _reserve(c) == 3072


# --- the replay against the real engine's graph, node by node -----------------------------------------------
# tests/data/llamacpp_graphs/*.json: the graph a real CPU build (llama-cpp-python 0.3.16 = b6150, 0.3.36 = b11312)
# reserved at n_ctx = n_ubatch = 512, read by benchmarks/llamacpp_graph_dump.py: every node's op, shape and the
# offset ggml-alloc gave it (null for a view), and the compute buffer's size.

GRAPHS = sorted((Path(__file__).parent / "data" / "llamacpp_graphs").glob("*.json"))
BUILD = {"0.3.16": 6150, "0.3.36": 11312}


@pytest.mark.parametrize("path", GRAPHS, ids=[p.stem for p in GRAPHS])
def test_the_built_graph_and_its_placement_are_the_real_engines(path):
    real = json.loads(path.read_text())
    s, build = real["settings"], BUILD[real["llama_cpp_python"]]
    spec = model_spec(real["model"])
    quantized = s["type_k"] != "f16" and build >= 11312 and spec.head_dim % 64 == 0
    rot_k = max(n for n in (64, 128, 256) if spec.head_dim % n == 0) if quantized else 0
    reserve = Reserve(512, 1, 512, s["flash_attn"] == "on", build, 512, rot_k, 64 if quantized else 0)
    graph = reserve_graph(graph_dims(spec, swa_layer_set(spec, build)), reserve)
    placed: dict = {}
    size = galloc.reserve(graph, free_extra_space=build >= 11312, offset=placed)
    ours = [[t.op, list(t.ne), None if t.view_src is not None else placed.get(id(t))] for t in graph.nodes]
    assert len(ours) == len(real["nodes"])
    first = next((i for i, (a, b) in enumerate(zip(ours, real["nodes"])) if a != b), None)
    assert first is None, (first, ours[first], real["nodes"][first])
    assert size == real["buffer_size"]
