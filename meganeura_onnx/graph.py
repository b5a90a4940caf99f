"""``Graph``: the IR plus one builder method per op of the table (Meganeura's names and order)."""

from __future__ import annotations

from typing import Any

from .ir import DType, GraphCore, NodeId, TensorType
from .ops import OPS
from .ops.attention import AttentionBuilders
from .ops.conv import ConvBuilders
from .ops.decoder import DecoderBuilders
from .ops.elementwise import ElementwiseBuilders
from .ops.embedding import EmbeddingBuilders
from .ops.kv_cache import KvCacheBuilders
from .ops.leaves import LeafBuilders
from .ops.linalg import LinalgBuilders
from .ops.losses import LossBuilders
from .ops.norm import NormBuilders
from .ops.reduce import ReduceBuilders
from .ops.rope import RopeBuilders
from .ops.shape import ShapeBuilders


class Graph(
    GraphCore,
    LeafBuilders,
    LinalgBuilders,
    ElementwiseBuilders,
    ReduceBuilders,
    LossBuilders,
    NormBuilders,
    RopeBuilders,
    AttentionBuilders,
    EmbeddingBuilders,
    KvCacheBuilders,
    DecoderBuilders,
    ConvBuilders,
    ShapeBuilders,
):
    """A model's forward pass, built imperatively: every builder appends a node and returns its NodeId.

    Shapes and dtypes are checked when a node is added; an invalid call raises ``ValueError`` or
    ``TypeError`` naming the op, the argument and the shapes, so nothing invalid reaches export.
    """

    def __init__(self) -> None:
        super().__init__()
        self._leaf_names: dict[str, NodeId] = {}

    def add_node(self, op: str, inputs: tuple[NodeId, ...], ty: TensorType, attrs: dict[str, Any]) -> NodeId:
        nid = super().add_node(op, inputs, ty, attrs)
        if "name" in attrs and OPS[op].leaf:
            self._leaf_names.setdefault(attrs["name"], nid)
        return nid

    def apply(self, op_name: str, *inputs: NodeId, **attrs: Any) -> NodeId:
        """Append a node of any op of the table: ``g.apply("silu", x)``, ``g.apply("gemm", a, b, bias, trans_b=True)``.

        The inputs are checked against the op's declaration and shape rule exactly as the named
        builders (which call this) check them; an unknown op raises ``ValueError`` naming it.
        """
        if op_name not in OPS or OPS[op_name].leaf:
            raise ValueError(f"apply: unknown op {op_name!r} (leaves have their own builders: input, parameter, constant)")
        d = OPS[op_name]
        types = []
        for k, nid in enumerate(inputs):
            arg = d.inputs[k] if k < len(d.inputs) else f"input {k}"
            if isinstance(nid, bool) or not isinstance(nid, int):
                raise TypeError(f"{op_name}: {arg} must be a NodeId (int), got {type(nid).__name__} {nid!r}")
            if not 0 <= nid < len(self._nodes):
                raise ValueError(f"{op_name}: {arg} refers to node {nid}, but the graph has {len(self._nodes)} nodes")
            ty = self._nodes[nid].ty
            want = DType.U32 if arg in d.u32_inputs else DType.F32
            if ty.dtype is not want:
                hint = " (use input_u32)" if want is DType.U32 else ""
                raise TypeError(f"{op_name}: {arg} must be {want.name}{hint}, got {ty.dtype.name} {list(ty.shape)} (node {nid})")
            types.append(ty)
        out = d.shape_rule(*types, **attrs)
        return self.add_node(op_name, tuple(inputs), out, attrs)

    # -- conveniences used by sessions and exporters ----------------------------------------------
    def leaves(self, op: str) -> list[tuple[str, NodeId]]:
        """``(name, NodeId)`` of every leaf of kind ``op`` (``input``, ``input_u32``, ``parameter``)."""
        return [(n.attrs["name"], n.id) for n in self._nodes if n.op == op]

    def parameters(self) -> dict[str, TensorType]:
        """Parameter name -> type, in creation order."""
        return {n.attrs["name"]: n.ty for n in self._nodes if n.op == "parameter"}

    def __repr__(self) -> str:
        return f"Graph({len(self._nodes)} nodes, outputs={self._outputs})"
