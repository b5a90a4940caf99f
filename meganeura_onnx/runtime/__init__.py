"""Sessions over ONNX Runtime."""

from .custom_ops import custom_op_library
from .inference import build_inference_session
from .plan import ExecutionPlan, MemorySummary
from .session import Session

__all__ = ["ExecutionPlan", "MemorySummary", "Session", "build_inference_session", "custom_op_library"]
