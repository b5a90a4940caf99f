"""meganeura-onnx: write a model once with a Meganeura-style Graph, export it to ONNX, train it and
run it with ONNX Runtime on CPU or CUDA."""

from importlib import metadata as _metadata

from .export import export_onnx
from .graph import Graph
from .ir import DType, Node, NodeId, TensorType
from .runtime import ExecutionPlan, MemorySummary, Session, build_inference_session, custom_op_library
from .runtime.training import TrainingSession, build_session, build_session_cached, build_session_with_report

try:
    # One version string: [project] version in pyproject.toml, read from the installed metadata.
    __version__: str = _metadata.version("meganeura-onnx")
except _metadata.PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "DType",
    "ExecutionPlan",
    "Graph",
    "MemorySummary",
    "Node",
    "NodeId",
    "Session",
    "TensorType",
    "TrainingSession",
    "__version__",
    "build_inference_session",
    "build_session",
    "build_session_cached",
    "build_session_with_report",
    "custom_op_library",
    "export_onnx",
]
