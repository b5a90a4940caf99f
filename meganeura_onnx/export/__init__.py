"""ONNX export of Graphs."""

from .onnx_export import DEFAULT_OPSET, IR_VERSION, ExportSpec, export_onnx, state_pairs, to_model

__all__ = ["DEFAULT_OPSET", "IR_VERSION", "ExportSpec", "export_onnx", "state_pairs", "to_model"]
