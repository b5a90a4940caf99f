"""meganeura-onnx: write a model once with a Meganeura-style Graph, export it to ONNX, train it and
run it with ONNX Runtime on CPU or CUDA."""

from .export import export_onnx
from .graph import Graph
from .ir import DType, Node, NodeId, TensorType

__version__ = "0.1.0"

__all__ = ["DType", "Graph", "Node", "NodeId", "TensorType", "export_onnx", "__version__"]
