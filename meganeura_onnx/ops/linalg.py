"""Matrix products: ``matmul``, ``matmul_at`` (A^T B) and ``matmul_bt`` (A B^T), all 2-D."""

from __future__ import annotations

from ..ir import NodeId, TensorType
from .table import examples, op, rank, require

# name: (contracted dim of a, of b, output dims (from a, from b), numpy, which operand ONNX transposes)
_MATMULS = {
    "matmul": ("[M,K] x [K,N]", lambda a, b: a @ b, (1, 0), (0, 1), (False, False)),
    "matmul_at": ("[K,M] x [K,N]", lambda a, b: a.T @ b, (0, 0), (1, 1), (True, False)),
    "matmul_bt": ("[M,K] x [N,K]", lambda a, b: a @ b.T, (1, 1), (0, 0), (False, True)),
}

for _name, (_sig, _ref, (_ka, _kb), (_ma, _nb), (_ta, _tb)) in _MATMULS.items():
    _d = op(_name, ("a", "b"))

    def _shape(a: TensorType, b: TensorType, _name=_name, _sig=_sig, _ka=_ka, _kb=_kb, _ma=_ma, _nb=_nb) -> TensorType:
        rank(_name, a, 2, "a")
        rank(_name, b, 2, "b")
        require(a.shape[_ka] == b.shape[_kb], _name, f"expects {_sig}: inner dimensions differ, a {list(a.shape)} and b {list(b.shape)}")
        return TensorType((a.shape[_ma], b.shape[_nb]))

    _d.shape(_shape)
    _d.numpy(_ref)

    def _lower(ctx, node, a, b, _ta=_ta, _tb=_tb):
        if _ta:
            a = ctx.op("Transpose", a, perm=[1, 0])
        if _tb:
            # Gemm folds the transpose into the kernel; MatMul would materialise it.
            return ctx.op("Gemm", a, b, transB=1)
        return ctx.op("MatMul", a, b)

    _d.onnx(_lower)

    def _ex(g, f, m, k, n, _name=_name, _ka=_ka, _kb=_kb):
        ashape = [m, k] if _ka == 1 else [k, m]
        bshape = [k, n] if _kb == 0 else [n, k]
        return g._emit(_name, f.param(g, "a", ashape), f.param(g, "b", bshape))

    examples(_d, _ex, {"m": 3, "k": 4, "n": 5}, {"m": 8, "k": 16, "n": 2})


class LinalgBuilders:
    def matmul(self, a: NodeId, b: NodeId) -> NodeId:
        """``a [M, K] @ b [K, N] -> [M, N]``."""
        return self._emit("matmul", a, b)

    def matmul_at(self, a: NodeId, b: NodeId) -> NodeId:
        """``a.T @ b`` with a stored as ``[K, M]`` and b ``[K, N]`` -> ``[M, N]``."""
        return self._emit("matmul_at", a, b)

    def matmul_bt(self, a: NodeId, b: NodeId) -> NodeId:
        """``a @ b.T`` with a ``[M, K]`` and b stored as ``[N, K]`` -> ``[M, N]`` (Linear layers)."""
        return self._emit("matmul_bt", a, b)
