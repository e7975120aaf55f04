"""The tensors of a ggml graph as far as the graph allocator sees them (engines/llamacpp/galloc.py): type, shape,
strides, sources, view source, the input/output flags and whether the data lives elsewhere (weights, KV cache).
The ops mirror ggml.c's constructors in what they create (shape, type, which tensor a view points into); the node
order is ggml_visit_parents' (ggml.c: sources left to right, depth first, each tensor once; an op-less tensor is a
leaf). llama.cpp's builders over these ops are in engines/llamacpp/graph_llm.py.
"""
from __future__ import annotations

# ggml_type ids and (block size, bytes per block) (ggml.c type_traits)
F32, F16, Q8_0, I32, I64 = 0, 1, 8, 26, 27
TYPE_BLOCK = {F32: (1, 4), F16: (1, 2), Q8_0: (32, 34), I32: (1, 4), I64: (1, 8)}

# ggml-alloc.c ggml_op_can_inplace (the ops of these graphs that may take their parent's bytes)
INPLACE_OPS = frozenset({"SCALE", "ADD", "ADD1", "SUB", "MUL", "DIV", "SQR", "SQRT", "LOG", "UNARY", "ROPE",
                         "RMS_NORM", "SOFT_MAX", "CLAMP", "FILL"})


class Tensor:
    __slots__ = ("op", "type", "ne", "nb", "src", "view_src", "view_offs", "input", "output", "external", "name",
                 "inplace")

    def __init__(self, op, ttype, ne, src=(), nb=None, view_src=None, view_offs=0, external=False, name=""):
        self.op, self.type, self.ne, self.src = op, ttype, tuple(ne) + (1,) * (4 - len(ne)), tuple(src)
        self.nb = nb or contiguous_strides(ttype, self.ne)
        if view_src is not None and view_src.view_src is not None:  # ggml_new_tensor_impl: views point at the root
            view_offs += view_src.view_offs
            view_src = view_src.view_src
        self.view_src, self.view_offs = view_src, view_offs
        self.input = self.output = False
        self.external, self.name = external, name
        self.inplace = op in INPLACE_OPS

    @property
    def nbytes(self) -> int:
        """ggml_nbytes (what ggml_backend_cpu_buffer_type's get_alloc_size returns)."""
        blck, size = TYPE_BLOCK[self.type]
        ne, nb = self.ne, self.nb
        if blck == 1:
            return size + sum((ne[i] - 1) * nb[i] for i in range(4))
        return ne[0] * nb[0] // blck + sum((ne[i] - 1) * nb[i] for i in range(1, 4))

    @property
    def layout(self) -> tuple:
        """ggml_are_same_layout: type, shape and strides."""
        return self.type, self.ne, self.nb

    def __repr__(self) -> str:
        return f"{self.op}({self.name or '?'} {self.ne})"


def contiguous_strides(ttype: int, ne: tuple) -> tuple:
    blck, size = TYPE_BLOCK[ttype]
    nb0 = size
    nb1 = nb0 * (ne[0] // blck)
    return (nb0, nb1, nb1 * ne[1], nb1 * ne[1] * ne[2])


class Graph:
    """ggml_build_forward_expand over the outputs in order: nodes and leafs as ggml_visit_parents lists them."""

    __slots__ = ("nodes", "leafs", "_seen")

    def __init__(self):
        self.nodes: list[Tensor] = []
        self.leafs: list[Tensor] = []
        self._seen: set[int] = set()

    def expand(self, tensor: Tensor) -> None:
        seen, nodes, leafs = self._seen, self.nodes, self.leafs
        stack = [(tensor, 0)]
        if id(tensor) in seen:
            return
        seen.add(id(tensor))
        while stack:  # iterative depth-first post-order, sources left to right
            t, i = stack.pop()
            srcs = t.src
            while i < len(srcs):
                s = srcs[i]
                i += 1
                if s is not None and id(s) not in seen:
                    seen.add(id(s))
                    stack.append((t, i))
                    stack.append((s, 0))
                    break
            else:
                (leafs if t.op == "NONE" else nodes).append(t)
