"""``Graph``: the IR plus one builder method per op of the table (Meganeura's names and order)."""

from __future__ import annotations

from typing import Any

from .ir import DType, GraphCore, NodeId, TensorType
from .ops import OPS
from .ops.attention import AttentionBuilders
from .ops.conv import ConvBuilders
from .ops.decode_layer import DecodeLayerBuilders
from .ops.decode_linear import DecodeLinearBuilders
from .ops.decoder import DecoderBuilders
from .ops.elementwise import ElementwiseBuilders
from .ops.embedding import EmbeddingBuilders
from .ops.flash_attention import FlashAttentionBuilders
from .ops.fused import FusedBuilders
from .ops.indices import IndexBuilders
from .ops.kv_cache import KvCacheBuilders
from .ops.leaves import LeafBuilders
from .ops.linalg import LinalgBuilders
from .ops.losses import LossBuilders
from .ops.norm import NormBuilders
from .ops.reduce import ReduceBuilders
from .ops.rope import RopeBuilders
from .ops.rope_attention import RopeAttentionBuilders
from .ops.shape import ShapeBuilders


class Graph(
    GraphCore,
    LeafBuilders,
    LinalgBuilders,
    ElementwiseBuilders,
    ReduceBuilders,
    IndexBuilders,
    LossBuilders,
    NormBuilders,
    RopeBuilders,
    RopeAttentionBuilders,
    AttentionBuilders,
    FlashAttentionBuilders,
    EmbeddingBuilders,
    FusedBuilders,
    DecodeLinearBuilders,
    DecodeLayerBuilders,
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

        Every named builder calls this, so they all check the same way: the number of inputs, that
        each is a NodeId of this graph with the declared dtype, every attribute against its
        declaration in the op table (type, range, finiteness; a bool is not a number), then the
        op's shape rule. Errors are ``TypeError``/``ValueError`` naming the op, the argument, what
        it accepts and what was given; an unknown op raises ``ValueError`` naming it.
        """
        if not isinstance(op_name, str) or op_name not in OPS or OPS[op_name].leaf:
            raise ValueError(f"apply: unknown op {op_name!r} (leaves have their own builders: input, parameter, constant)")
        d = OPS[op_name]
        ids, types = [], []
        for k, (arg, value) in enumerate(zip(d.input_names(len(inputs)), inputs, strict=True)):
            nid = self.handle(value, arg, op_name)
            ty = self._nodes[nid].ty
            want = d.input_dtype(arg if k < len(d.inputs) else d.variadic[(k - len(d.inputs)) % len(d.variadic)])
            if ty.dtype is not want:
                hint = " (use input_u32)" if want is DType.U32 else ""
                raise TypeError(f"{op_name}: {arg} must be {want.name}{hint}, got {ty.dtype.name} {list(ty.shape)} (node {nid})")
            ids.append(nid)
            types.append(ty)
        attrs = d.check_attrs(attrs)
        out = d.shape_rule(*types, **attrs)
        return self.add_node(op_name, tuple(ids), out, attrs)

    # -- conveniences used by sessions and exporters ----------------------------------------------
    def leaves(self, op: str) -> list[tuple[str, NodeId]]:
        """``(name, NodeId)`` of every leaf of kind ``op`` (``input``, ``input_u32``, ``parameter``)."""
        return [(n.attrs["name"], n.id) for n in self._nodes if n.op == op]

    def parameters(self) -> dict[str, TensorType]:
        """Parameter name -> type, in creation order."""
        return {n.attrs["name"]: n.ty for n in self._nodes if n.op == "parameter"}

    def __repr__(self) -> str:
        return f"Graph({len(self._nodes)} nodes, outputs={self._outputs})"
