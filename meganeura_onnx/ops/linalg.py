"""Matrix products: ``matmul``, ``matmul_at`` (A^T B) and ``matmul_bt`` (A B^T), all 2-D."""

from __future__ import annotations

from ..ir import NodeId, TensorType
from .table import OPS, bool_attr, examples, op, rank, require, same_dim

# name: (contracted dim of a, of b, output dims (from a, from b), numpy, which operand ONNX transposes)
_MATMULS = {
    "matmul": ("[M,K] x [K,N]", lambda a, b: a @ b, (1, 0), (0, 1), (False, False)),
    "matmul_at": ("[K,M] x [K,N]", lambda a, b: a.T @ b, (0, 0), (1, 1), (True, False)),
    "matmul_bt": ("[M,K] x [N,K]", lambda a, b: a @ b.T, (1, 1), (0, 0), (False, True)),
}

for _name, (_sig, _ref, (_ka, _kb), (_ma, _nb), (_ta, _tb)) in _MATMULS.items():
    # fan_in: the contracted axis of each operand (what the default init scales by)
    _d = op(_name, ("a", "b"), fan_in={"a": _ka, "b": _kb})

    def _shape(a: TensorType, b: TensorType, _name=_name, _sig=_sig, _ka=_ka, _kb=_kb, _ma=_ma, _nb=_nb) -> TensorType:
        rank(_name, a, 2, "a")
        rank(_name, b, 2, "b")
        same_dim(_name, a.shape[_ka], b.shape[_kb], f"expects {_sig}: inner dimensions differ, a {list(a.shape)} and b {list(b.shape)}")
        return TensorType((a.shape[_ma], b.shape[_nb]))

    _d.shape(_shape)
    _d.numpy(_ref)

    def _lower(ctx, node, a, b, _ta=_ta, _tb=_tb):
        # Gemm folds a transposed operand into the kernel (a BLAS transpose flag); MatMul would need a
        # Transpose node materialising it first (a copy per weight gradient in every train step).
        if _ta or _tb:
            return ctx.op("Gemm", a, b, transA=int(_ta), transB=int(_tb))
        return ctx.op("MatMul", a, b)

    _d.onnx(_lower)

    def _ex(g, f, m, k, n, _name=_name, _ka=_ka, _kb=_kb):
        ashape = [m, k] if _ka == 1 else [k, m]
        bshape = [k, n] if _kb == 0 else [n, k]
        return g.apply(_name, f.param(g, "a", ashape), f.param(g, "b", bshape))

    examples(_d, _ex, {"m": 3, "k": 4, "n": 5}, {"m": 8, "k": 16, "n": 2})


# Each product's VJP is a pair of products, so no transpose op is needed:
#   C = A B     : dA = dC B^T  (matmul_bt), dB = A^T dC (matmul_at)
#   C = A^T B   : dA = B dC^T  (matmul_bt), dB = A dC   (matmul)
#   C = A B^T   : dA = dC B    (matmul),    dB = dC^T A (matmul_at)
OPS["matmul"].vjp(lambda g, node, dy: [g.matmul_bt(dy, node.inputs[1]), g.matmul_at(node.inputs[0], dy)])
OPS["matmul_at"].vjp(lambda g, node, dy: [g.matmul_bt(node.inputs[1], dy), g.matmul(node.inputs[0], dy)])
OPS["matmul_bt"].vjp(lambda g, node, dy: [g.matmul(dy, node.inputs[1]), g.matmul_at(dy, node.inputs[0])])


# -- fused product + bias (what the e-graph optimizer turns matmul/matmul_bt + bias_add into) -------
gemm = op("gemm", ("a", "b", "bias"), attrs=(bool_attr("trans_b"),))


@gemm.shape
def _(a: TensorType, b: TensorType, bias: TensorType, *, trans_b: bool) -> TensorType:
    out = OPS["matmul_bt" if trans_b else "matmul"].shape_rule(a, b, _name="gemm")  # errors name gemm
    require(
        bias.shape in ((out.shape[1],), out.shape),
        "gemm",
        f"bias must have shape [{out.shape[1]}] (a bias row) or {list(out.shape)} (a residual), got {list(bias.shape)}",
    )
    return out


# One kernel instead of two, and the product never makes a round trip through memory.
gemm.rewrite("matmul_bias_to_gemm", "(bias_add (matmul ?a ?b) ?bias)", '(gemm ?a ?b ?bias {"trans_b": False})')
gemm.rewrite("matmul_bt_bias_to_gemm", "(bias_add (matmul_bt ?a ?b) ?bias)", '(gemm ?a ?b ?bias {"trans_b": True})')
# A residual added to a product (LLaMA's o_proj and down_proj outputs join the residual stream) is
# Gemm's C input with beta = 1: standard ONNX, one node instead of Gemm + Add (ORT fuses neither).
for _prod, _tb in (("matmul", False), ("matmul_bt", True)):
    _attrs = f'{{"trans_b": {_tb}}}'
    gemm.rewrite(f"residual_add_{_prod}_to_gemm", f"(add ?c ({_prod} ?a ?b))", f"(gemm ?a ?b ?c {_attrs})")
    gemm.rewrite(f"{_prod}_add_residual_to_gemm", f"(add ({_prod} ?a ?b) ?c)", f"(gemm ?a ?b ?c {_attrs})")
gemm.numpy(lambda a, b, bias, *, trans_b: (a @ (b.T if trans_b else b)) + (bias if bias.ndim == 2 else bias.reshape(1, -1)))
gemm.onnx(lambda ctx, node, a, b, bias: ctx.op("Gemm", a, b, bias, transB=int(bool(node.attrs["trans_b"]))))


@gemm.vjp
def _(g, node, dy):
    a, b, _bias = node.inputs
    inner = OPS["matmul_bt" if node.attrs["trans_b"] else "matmul"].vjp_rule(g, node, dy)
    return [*inner, dy if g.node(_bias).ty.rank() == 2 else g.col_sum(dy)]


def _ex_gemm(g, f, m, k, n, trans_b, residual=False):
    b = f.param(g, "b", [n, k] if trans_b else [k, n])
    return g.gemm(f.param(g, "a", [m, k]), b, f.param(g, "bias", [m, n] if residual else [n]), trans_b)


examples(
    gemm,
    _ex_gemm,
    {"m": 3, "k": 4, "n": 5, "trans_b": False},
    {"m": 6, "k": 2, "n": 3, "trans_b": True},
    {"m": 2, "k": 5, "n": 4, "trans_b": True, "residual": True},
    {"m": 4, "k": 3, "n": 2, "trans_b": False, "residual": True},
)


class LinalgBuilders:
    def gemm(self, a: NodeId, b: NodeId, bias: NodeId, trans_b: bool = False) -> NodeId:
        """``a @ b + bias`` (``a @ b.T + bias`` with ``trans_b``): one ONNX Gemm. ``bias`` is a row
        ``[N]`` or a residual ``[M, N]``. The e-graph optimizer fuses ``bias_add(matmul(a, b), bias)``
        and ``add(residual, matmul(a, b))`` into this."""
        return self.apply("gemm", a, b, bias, trans_b=trans_b)

    def matmul(self, a: NodeId, b: NodeId) -> NodeId:
        """``a [M, K] @ b [K, N] -> [M, N]``."""
        return self.apply("matmul", a, b)

    def matmul_at(self, a: NodeId, b: NodeId) -> NodeId:
        """``a.T @ b`` with a stored as ``[K, M]`` and b ``[K, N]`` -> ``[M, N]``."""
        return self.apply("matmul_at", a, b)

    def matmul_bt(self, a: NodeId, b: NodeId) -> NodeId:
        """``a @ b.T`` with a ``[M, K]`` and b stored as ``[N, K]`` -> ``[M, N]`` (Linear layers)."""
        return self.apply("matmul_bt", a, b)
