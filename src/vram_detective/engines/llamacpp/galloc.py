"""A replay of ggml's graph allocator (ggml/src/ggml-alloc.c, ggml_gallocr_reserve_n ->
ggml_gallocr_alloc_graph_impl, llama.cpp b6150 and b11312 trees) over a graph from engines/llamacpp/graph.py:
the size it records is the compute buffer a build reserves (llama-context.cpp prints it as "compute buffer size").

What is replayed, as the allocator does it on one buffer type (a CPU-only build's one backend):
- leafs first, in graph order: a leaf without data (an input) takes its bytes; weights and KV-cache tensors have data;
- then the nodes in order, counting each tensor's children and views first and placing the graph inputs
  (GGML_TENSOR_FLAG_INPUT) before anything else;
- per node: parents, then the node: a view takes nothing; an op that may run in place (ggml_op_can_inplace) takes
  its first own parent's bytes when the parent has that one child, no views, the same layout and is not an output;
- after each node, a parent whose children and views reach zero is freed (a view frees its source once the source
  has no views and no children left); outputs are never freed.
- the dynamic allocator (ggml_dyn_tallocr): sizes padded to the alignment; the best-fitting free block other than the
  last one, else the last block (the growing tail); frees merge with neighbours; the recorded max_size is the buffer.
  From b11312 (chunks, one chunk for a CPU buffer whose max size is unbounded) an in-place node that is smaller than
  its parent frees the rest at once (ggml_gallocr_free_extra_space).
"""
from __future__ import annotations

from .graph import Graph, Tensor

MAX_HALF = (1 << 63) - 1  # ggml_dyn_tallocr_reset: the last block spans SIZE_MAX/2


class _Allocator:
    """ggml_dyn_tallocr: a sorted list of [offset, size] free blocks, the last one the open tail."""

    __slots__ = ("align", "blocks", "max_size")

    def __init__(self, alignment: int):
        self.align = alignment
        self.blocks = [[0, MAX_HALF]]
        self.max_size = 0

    def _pad(self, size: int) -> int:
        return -(-size // self.align) * self.align

    def alloc(self, size: int) -> int:
        size = self._pad(size)
        blocks = self.blocks
        best, best_size = -1, None
        for i in range(len(blocks) - 1):  # best fit besides the last block; ties go to the later block (<=)
            bsize = blocks[i][1]
            if bsize >= size and (best_size is None or bsize <= best_size):
                best, best_size = i, bsize
        if best < 0:
            best = len(blocks) - 1
        block = blocks[best]
        offset = block[0]
        block[0] += size
        block[1] -= size
        if block[1] == 0:
            del blocks[best]
        if offset + size > self.max_size:
            self.max_size = offset + size
        return offset

    def free(self, offset: int, size: int) -> None:
        size = self._pad(size)
        blocks = self.blocks
        for i, block in enumerate(blocks):
            if block[0] + block[1] == offset:  # the freed bytes follow this block
                block[1] += size
                if i + 1 < len(blocks) and block[0] + block[1] == blocks[i + 1][0]:
                    block[1] += blocks[i + 1][1]
                    del blocks[i + 1]
                return
            if offset + size == block[0]:  # they precede it
                block[0] = offset
                block[1] += size
                if i > 0 and blocks[i - 1][0] + blocks[i - 1][1] == block[0]:
                    blocks[i - 1][1] += block[1]
                    del blocks[i]
                return
        pos = 0
        while pos < len(blocks) and blocks[pos][0] < offset:
            pos += 1
        blocks.insert(pos, [offset, size])


def reserve(graph: Graph, alignment: int = 32, free_extra_space: bool = False, offset: dict | None = None) -> int:
    """The bytes ggml_gallocr_reserve records for `graph` on one buffer (CPU buffer alignment: 32, ggml-backend.cpp
    TENSOR_ALIGNMENT via ggml_backend_cpu_buffer_type_get_alignment). `offset`, when given, receives each placed
    tensor's offset by id()."""
    replay = _Replay(_Allocator(alignment), free_extra_space, {} if offset is None else offset)
    replay.count(graph)
    for node in graph.nodes:
        for parent in node.src:
            if parent is not None:
                replay.allocate(parent)
        replay.allocate(node)
        for parent in node.src:
            if parent is not None:
                replay.consumed(parent)
    return replay.alloc.max_size


class _Replay:
    """ggml_gallocr_alloc_graph_impl's bookkeeping over one graph (ggml-alloc.c): children and views per tensor,
    whether a tensor owns its bytes (hash_node.allocated), and each tensor's offset."""

    def __init__(self, alloc: _Allocator, free_extra_space: bool, offset: dict):
        self.alloc, self.free_extra_space, self.offset = alloc, free_extra_space, offset
        self.children: dict[int, int] = {}
        self.views: dict[int, int] = {}
        self.owned: dict[int, bool] = {}

    def count(self, graph: Graph) -> None:
        """Leafs placed first; then each node's views and children counted, graph inputs placed as met."""
        for leaf in graph.leafs:
            self.allocate(leaf)
        for node in graph.nodes:
            if node.view_src is not None:
                self.views[id(node.view_src)] = self.views.get(id(node.view_src), 0) + 1
            if node.input:
                self.allocate(node)
            for src in node.src:
                if src is not None:
                    self.children[id(src)] = self.children.get(id(src), 0) + 1
                    if src.input:
                        self.allocate(src)

    def allocate(self, t: Tensor) -> None:
        key = id(t)
        if t.external or self.owned.get(key) or t.view_src is not None:
            return
        self.owned[key] = True
        if not (t.inplace and self._reuse_a_parent(t)):
            self.offset[key] = self.alloc.alloc(t.nbytes)

    def _reuse_a_parent(self, t: Tensor) -> bool:
        """An in-place op takes the bytes of a parent no one else reads (one child, no views, same layout), or of
        the tensor a viewing parent views when that view is its only user."""
        for parent in t.src:
            if parent is None or not self.owned.get(id(parent)):
                continue
            if parent.output or (parent.view_src is not None and parent.view_src.output):
                continue
            if parent.layout != t.layout:
                continue
            pk = id(parent)
            if self.children.get(pk, 0) != 1 or self.views.get(pk, 0) != 0:
                continue
            source = parent.view_src
            if source is not None:
                vk = id(source)
                # (the source's data equals the view's: both unset while reserving)
                if not (self.views.get(vk, 0) == 1 and self.children.get(vk, 0) == 0):
                    continue
                self.owned[vk] = False
            else:
                source = parent
            self.offset[id(t)] = self.offset[id(source)]
            self.owned[pk] = False
            if self.free_extra_space and source.nbytes > t.nbytes:
                pad = self.alloc._pad
                self.alloc.free(self.offset[id(t)] + pad(t.nbytes), pad(source.nbytes) - pad(t.nbytes))
            return True
        return False

    def consumed(self, parent: Tensor) -> None:
        """A node read `parent`: its last reader frees it (or, for a view, the viewed tensor's last view)."""
        pk = id(parent)
        self.children[pk] -= 1
        if self.children[pk] != 0 or self.views.get(pk, 0) != 0:
            return
        source = parent.view_src
        if source is not None:
            vk = id(source)
            self.views[vk] -= 1
            if self.views[vk] == 0 and self.children.get(vk, 0) == 0 and self.owned.get(vk):
                self._release(source)
        elif self.owned.get(pk):
            self._release(parent)

    def _release(self, t: Tensor) -> None:
        if t.output:
            return
        self.alloc.free(self.offset[id(t)], t.nbytes)
        self.owned[id(t)] = False
