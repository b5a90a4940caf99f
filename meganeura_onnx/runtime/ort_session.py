"""The ONNX Runtime side of a :class:`~meganeura_onnx.runtime.session.Session`: execution providers,
session options, opening the ORT session with our custom-op library, and the check that a CUDA
graph can replay it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx
import onnxruntime as ort

from . import custom_ops


def providers_for(device: str, providers: Sequence | None = None, cuda_graph: bool = False, tf32: bool = False) -> tuple[list, str]:
    """ORT provider list and OrtValue device type for ``device`` ("cpu" or "cuda"); ``tf32``: let
    float32 MatMul/Conv use TF32 tensor cores (CUDA)."""
    if providers is not None:
        names = [p if isinstance(p, str) else p[0] for p in providers]
        return list(providers), "cuda" if names and names[0] == "CUDAExecutionProvider" else "cpu"
    if device == "cpu":
        return ["CPUExecutionProvider"], "cpu"
    if device == "cuda":
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise RuntimeError(
                f"device='cuda' needs onnxruntime-gpu with CUDAExecutionProvider; this onnxruntime {ort.__version__} has {ort.get_available_providers()}"
            )
        # Strict fp32 MatMul (as PyTorch by default): TF32 is opt-in (precision="tf32" or providers=).
        # The arena grows by what is asked, not to the next power of two: with a train step's
        # gigabytes of activations, doubling reserves up to twice the peak (shapes are static, so
        # after the first step nothing is allocated again either way).
        options = {"use_tf32": "1" if tf32 else "0", "arena_extend_strategy": "kSameAsRequested"}
        if cuda_graph:
            options["enable_cuda_graph"] = "1"
        return [("CUDAExecutionProvider", options), "CPUExecutionProvider"], "cuda"
    raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")


def check_capturable(sess: ort.InferenceSession) -> None:
    """Refuse (ValueError naming the nodes) what a CUDA graph cannot replay: nodes placed on the
    CPU (other than ORT's shape computations, which it runs once) and host copies (Memcpy nodes).
    Older ORT versions only log this and silently run without a graph."""
    placement = [(n.name, n.op_type, sub.ep_name) for sub in sess.get_provider_graph_assignment_info() for n in sub.get_nodes()]
    memcpy = [f"{op} {name}" for name, op, _ in placement if op.startswith("Memcpy")]
    on_cpu = [f"{op} {name}" for name, op, ep in placement if ep == "CPUExecutionProvider" and op not in _SHAPE_OPS]
    if memcpy or on_cpu:
        raise ValueError(
            "cuda_graph=True needs every node on CUDAExecutionProvider with no host copy; "
            f"on the CPU: {on_cpu[:8]}, host copies: {memcpy[:8]} (is the CUDA custom-op library built?)"
        )


def apply_session_options(opts: ort.SessionOptions, options: Mapping[str, object]) -> None:
    """Set ``ort.SessionOptions`` attributes by name (``execution_order`` by its enum member's name,
    e.g. ``"PRIORITY_BASED"``); an unknown name is a ValueError naming it."""
    for key, value in options.items():
        if key.startswith("_") or not hasattr(opts, key):
            raise ValueError(f"session_options: ort.SessionOptions has no attribute {key!r}")
        if key == "execution_order" and isinstance(value, str):
            if value not in ort.ExecutionOrder.__members__:
                raise ValueError(f"session_options: execution_order must be one of {list(ort.ExecutionOrder.__members__)}, got {value!r}")
            value = ort.ExecutionOrder.__members__[value]
        setattr(opts, key, value)


# ORT places these on the CPU when they compute shapes only; they do not run inside the graph.
_SHAPE_OPS = frozenset({"Shape", "Size", "Gather", "Concat", "Unsqueeze", "Squeeze", "Slice", "Reshape", "Cast", "ConstantOfShape"})


def open_ort_session(
    model: onnx.ModelProto,
    providers: list,
    device: str,
    precision: str,
    cuda_graph: bool,
    use_custom_ops: bool,
    session_config: Mapping[str, str] | None,
    session_options: Mapping[str, object] | None,
) -> tuple[ort.InferenceSession, str | None]:
    """The ORT session of ``model`` on ``providers`` (of ``device``, "cpu" or "cuda"), and the
    custom-op library registered with it (None without). ``session_config``: ORT session config
    entries (e.g. thread spinning); ``session_options``: ``ort.SessionOptions`` attributes."""
    opts = ort.SessionOptions()
    opts.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    for key, value in (session_config or {}).items():
        opts.add_session_config_entry(key, value)
    apply_session_options(opts, session_options or {})
    lib = custom_ops.register(opts, device) if use_custom_ops else None
    try:
        # ORT fuses a Cast from bfloat16 into its SimplifiedLayerNormalization, a type mix that
        # no ORT kernel implements (the session then fails to load on CUDA).
        disabled = ["SimplifiedLayerNormFusion"] if precision == "bf16" else None
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=providers, disabled_optimizers=disabled)
    except Exception as e:
        if cuda_graph and "graph capture" in str(e).lower():
            raise ValueError(f"cuda_graph=True: ONNX Runtime cannot capture this model as a CUDA graph: {e}") from e
        raise
    return sess, lib
