"""Training artifacts for ONNX Runtime's on-device training runtime (``onnxruntime-training``).

:func:`generate_training_artifacts` turns a loss Graph into the four files that
``onnxruntime.training.api`` (and ORT's mobile/web training runtimes) load: ``training_model.onnx``,
``eval_model.onnx``, ``optimizer_model.onnx`` and ``checkpoint``.

- The Graph's own output 0 is the loss (f32 ``[1]``): no second loss is appended
  (``generate_artifacts(loss=None)`` passes the outputs through and differentiates the first one).
- The trainable set is the Graph's parameters (exported as initializers, which is how
  ``generate_artifacts`` recognises parameters).
- ORT's gradient builder cannot differentiate custom-domain ops, so the ``com.meganeura`` nodes are
  replaced by their model-local function bodies (standard ONNX) first.
- Everything that can be checked on the Graph (a scalar loss, every parameter reaching it through
  differentiable ops) is checked before onnxruntime-training is imported, so a bad graph fails with
  a message naming the problem instead of an ORT gradient-builder error.

onnxruntime-training 1.19.2 (Sep 2024) is the last release and conflicts with the ``onnxruntime``
package, so it lives in its own virtual environment (``make ort-training``); the main package never
imports it at module level.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from .ir import DType, GraphCore, NodeId
from .ops import OPS

INSTALL_HINT = (
    "onnxruntime-training is not importable in this environment. It is pinned to its last release and lives in its own "
    "virtual environment: run `make ort-training` (creates .venv-ort-training with onnxruntime-training-cpu==1.19.2, "
    "onnx==1.16.2, numpy<2, torch CPU and this package installed --no-deps) and use .venv-ort-training/bin/python."
)
OPTIMIZERS = ("adamw", "sgd")
ARTIFACT_FILES = ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx", "checkpoint")


class TrainingArtifactsError(ValueError):
    """The Graph cannot be turned into training artifacts (raised before onnxruntime-training runs)."""


def import_ort_training() -> Any:
    """``onnxruntime.training`` (imported lazily), or an ``ImportError`` that says how to install it."""
    try:
        import onnxruntime.training.api  # noqa: F401
        from onnxruntime.training import artifacts  # noqa: F401
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT} (import failed: {e})") from e
    import onnxruntime.training

    return onnxruntime.training


def ort_training_available() -> bool:
    """True when ``onnxruntime.training`` imports here (the training venv), without raising."""
    try:
        import_ort_training()
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class AdamWConfig:
    """AdamW hyper-parameters baked into ``optimizer_model.onnx`` (ORT takes them as node attributes;
    only the learning rate is a runtime input). ``adam_mode=0`` is PyTorch's ``torch.optim.AdamW``
    (bias-corrected ``m_hat / (sqrt(v_hat) + eps)``, decoupled decay ``w -= lr * wd * w`` first);
    ORT's default (1, Hugging Face's) adds eps before the bias correction."""

    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0


@dataclass
class TrainingArtifacts:
    """Paths of the generated files plus what the Session backend needs to drive them."""

    directory: Path
    parameters: list[str]
    inputs: list[str]
    optimizer: str
    adamw: AdamWConfig | None = None
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def training_model(self) -> Path:
        return self.files["training_model.onnx"]

    @property
    def eval_model(self) -> Path:
        return self.files["eval_model.onnx"]

    @property
    def optimizer_model(self) -> Path:
        return self.files["optimizer_model.onnx"]

    @property
    def checkpoint(self) -> Path:
        return self.files["checkpoint"]


# -- checks on the Graph (no onnxruntime-training needed) --------------------------------------------
def _describe(graph: GraphCore, nid: NodeId) -> str:
    n = graph.node(nid)
    name = f" {n.attrs['name']!r}" if "name" in n.attrs else ""
    return f"node {nid} ({n.op}{name}) {n.ty}"


def check_trainable(graph: GraphCore) -> list[str]:
    """Validate ``graph`` for gradient training; returns the parameter names (creation order).

    Raises :class:`TrainingArtifactsError` when output 0 is not a scalar f32 loss, when the graph
    has no parameters, or when a parameter does not reach the loss through differentiable ops
    (``greater``, ``cache_write``, ``cached_attention`` have no gradient).
    """
    outs = graph.outputs()
    if not outs:
        raise TrainingArtifactsError("training artifacts: the graph has no outputs; set_outputs([loss, ...]) with the scalar loss first")
    loss = graph.node(outs[0])
    if loss.ty.dtype is not DType.F32 or loss.ty.num_elements() != 1:
        raise TrainingArtifactsError(
            f"training artifacts: output 0 must be the scalar loss (f32 [1], e.g. cross_entropy_loss or mse_loss), "
            f"got {_describe(graph, outs[0])}. ONNX Runtime training differentiates output 0; no loss is appended."
        )
    symbolic = [_describe(graph, n.id) for n in graph.nodes() if n.op in ("input", "input_u32") and not n.ty.is_static()]
    if symbolic:
        raise TrainingArtifactsError(
            f"training artifacts: inputs with symbolic dimensions ({'; '.join(symbolic)}) are not supported by the "
            "onnxruntime-training backend; use static shapes here (the native engine, build_session(g), trains them)"
        )
    params = [(n.attrs["name"], n.id) for n in graph.nodes() if n.op == "parameter"]
    if not params:
        raise TrainingArtifactsError("training artifacts: the graph has no parameters, so there is nothing to train")
    # Walk back from the loss twice: once along every edge (what the loss depends on at all) and
    # once along differentiable edges only (what gradients reach). A parameter in the first set but
    # not in the second is only connected through ops without a gradient.
    reached, grad_reached = _ancestors(graph, outs[0], diff_only=False), _ancestors(graph, outs[0], diff_only=True)
    unused = [name for name, nid in params if nid not in reached]
    blocked = [name for name, nid in params if nid in reached and nid not in grad_reached]
    problems = []
    if unused:
        problems.append(f"parameters {unused} do not reach the loss (output 0)")
    if blocked:
        ops = sorted({graph.node(i).op for i in reached if not OPS[graph.node(i).op].differentiable and not OPS[graph.node(i).op].leaf})
        problems.append(f"parameters {blocked} reach the loss only through ops without a gradient ({', '.join(ops)})")
    if problems:
        raise TrainingArtifactsError(
            "training artifacts: " + "; ".join(problems) + ". Every parameter must be differentiable w.r.t. the loss: "
            "remove it, make it an input, or route it through differentiable ops."
        )
    return [name for name, _ in params]


def _ancestors(graph: GraphCore, root: NodeId, *, diff_only: bool) -> set[NodeId]:
    seen: set[NodeId] = set()
    stack = [root]
    while stack:
        nid = stack.pop()
        if nid in seen:
            continue
        seen.add(nid)
        node = graph.node(nid)
        if diff_only and not OPS[node.op].differentiable:
            continue  # gradients stop here; the node itself is reached, its inputs are not
        stack.extend(node.inputs)
    return seen


# -- the ONNX model handed to generate_artifacts -----------------------------------------------------
def forward_model(graph: GraphCore, parameters: Mapping[str, np.ndarray] | None = None, *, seed: int = 0) -> onnx.ModelProto:
    """The forward model with parameters as initializers and com.meganeura functions inlined.

    The graph's first output is the loss. Missing parameter values take the default init
    (:func:`meganeura_onnx.init.default_parameters` with ``seed``).
    """
    from .export import to_model
    from .init import default_parameters

    values = default_parameters(graph, seed)
    unknown = set(parameters or {}) - set(values)
    if unknown:
        raise TrainingArtifactsError(f"training artifacts: parameters {sorted(unknown)} are not in the graph (it has {sorted(values)})")
    values.update({k: np.asarray(v, np.float32) for k, v in (parameters or {}).items()})
    model, _ = to_model(graph, parameters=values, model_name="meganeura_training")
    return expose_gradient_outputs(split_as_slices(inline_custom_functions(model)))


def inline_custom_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """Replace every ``com.meganeura`` node by its model-local function body (standard ONNX).

    ``onnx.inliner`` exists in onnx 1.16 (the training venv's pin) and later; it resolves the
    bodies' ``ref_attr_name`` attributes against each call site.
    """
    import onnx.inliner

    inlined = onnx.inliner.inline_local_functions(model)
    left = sorted({n.op_type for n in inlined.graph.node if n.domain == "com.meganeura"})
    if left:
        raise TrainingArtifactsError(f"training artifacts: com.meganeura ops {left} have no function body to inline")
    del inlined.functions[:]
    kept = [o for o in inlined.opset_import if o.domain != "com.meganeura"]
    del inlined.opset_import[:]
    inlined.opset_import.extend(kept)
    return _castlike_to_float(inlined)


def _castlike_to_float(model: onnx.ModelProto) -> onnx.ModelProto:
    """``CastLike(x, like)`` as ``Cast(x, to=FLOAT)``. The function bodies cast to their input's
    element type so that float16/bfloat16 models run them too; onnxruntime-training 1.19 has no
    gradient builder for CastLike, and training artifacts are float32 throughout."""
    for node in model.graph.node:
        if node.op_type == "CastLike" and node.domain in ("", "ai.onnx"):
            del node.input[1:]
            node.op_type = "Cast"
            node.attribute.extend([onnx.helper.make_attribute("to", onnx.TensorProto.FLOAT)])
    return model


def _constant_ints(model: onnx.ModelProto, name: str) -> list[int] | None:
    """The values of an int64 initializer or Constant node named ``name`` (None: not a constant)."""
    for t in model.graph.initializer:
        if t.name == name:
            return [int(v) for v in onnx.numpy_helper.to_array(t).ravel()]
    for n in model.graph.node:
        if n.op_type == "Constant" and list(n.output) == [name]:
            return [int(v) for v in onnx.numpy_helper.to_array(n.attribute[0].t).ravel()]
    return None


def split_as_slices(model: onnx.ModelProto) -> onnx.ModelProto:
    """Each ``Split`` with constant sizes as one ``Slice`` per output that something reads.
    onnxruntime-training 1.19's Split gradient concatenates only the gradients that exist, so with a
    piece nobody reads the input's gradient comes out too small (wrong, not an error); each Slice's
    gradient pads its piece into place."""
    nodes: list[onnx.NodeProto] = []
    read = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
    for k, node in enumerate(model.graph.node):
        sizes = _constant_ints(model, node.input[1]) if node.op_type == "Split" and len(node.input) > 1 else None
        if node.domain not in ("", "ai.onnx") or sizes is None:
            nodes.append(node)
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        starts = np.cumsum([0, *sizes])
        for j, out in enumerate(node.output):
            if out not in read:  # ORT would build a gradient path for it too
                continue
            bounds = [f"{out}/slice_{b}" for b in ("starts", "ends", "axes")]
            for b, v in zip(bounds, (starts[j], starts[j + 1], axis), strict=True):
                model.graph.initializer.append(onnx.numpy_helper.from_array(np.array([v], np.int64), b))
            nodes.append(onnx.helper.make_node("Slice", [node.input[0], *bounds], [out], name=f"{node.name or k}/slice_{j}"))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


# Forward ops whose ORT 1.19 gradient builder reads optional outputs of the forward node (and fails
# with an index out of range when the node declares fewer): op type -> outputs it must declare.
_OUTPUTS_READ_BY_GRADIENT = {"LayerNormalization": 3, "SoftmaxCrossEntropyLoss": 2}


def expose_gradient_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """Give ``LayerNormalization`` its optional Mean/InvStdDev and ``SoftmaxCrossEntropyLoss`` its
    log_prob output: ORT 1.19's gradients of those ops read them; ours declare only the first."""
    for k, node in enumerate(model.graph.node):
        want = _OUTPUTS_READ_BY_GRADIENT.get(node.op_type, 0) if node.domain in ("", "ai.onnx") else 0
        while len(node.output) < want:
            node.output.append(f"{node.name or f'{node.op_type.lower()}_{k}'}/extra_{len(node.output)}")
    return model


def patch_adamw(optimizer_model: onnx.ModelProto, config: AdamWConfig) -> onnx.ModelProto:
    """Set the AdamWOptimizer node's hyper-parameters and PyTorch mode (see :class:`AdamWConfig`)."""
    values = {"alpha": config.beta1, "beta": config.beta2, "epsilon": config.eps, "weight_decay": config.weight_decay, "adam_mode": 0}
    nodes = [n for n in optimizer_model.graph.node if n.op_type == "AdamWOptimizer"]
    if len(nodes) != 1:
        raise RuntimeError(f"optimizer model: expected one AdamWOptimizer node, found {len(nodes)}")
    for attr in nodes[0].attribute:
        if attr.name in values:
            if attr.type == onnx.AttributeProto.INT:
                attr.i = int(values[attr.name])
            else:
                attr.f = float(values[attr.name])
    return optimizer_model


def generate_training_artifacts(
    graph: GraphCore,
    out_dir: str | os.PathLike,
    optimizer: str = "adamw",
    *,
    parameters: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    adamw: AdamWConfig | None = None,
) -> TrainingArtifacts:
    """Write ``training_model.onnx``, ``eval_model.onnx``, ``optimizer_model.onnx`` and ``checkpoint``
    for ``graph`` into ``out_dir`` with ``onnxruntime.training.artifacts.generate_artifacts``.

    ``optimizer`` is ``"adamw"`` (PyTorch-style AdamW, hyper-parameters from ``adamw``, defaults
    ``beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0``) or ``"sgd"``. Initial parameter values come
    from ``parameters`` or the default init with ``seed``. The graph is validated first
    (:func:`check_trainable`); a missing onnxruntime-training raises ``ImportError`` saying how to
    install it. Files are generated in a temporary folder and moved into ``out_dir`` at the end, so a
    failure leaves no half-written set behind.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"generate_training_artifacts: optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    names = check_trainable(graph)
    model = forward_model(graph, parameters, seed=seed)
    onnx.checker.check_model(model, full_check=True)
    import_ort_training()
    _quiet_ort_logging()
    from onnxruntime.training import artifacts

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = adamw or AdamWConfig()
    optim = artifacts.OptimType.AdamW if optimizer == "adamw" else artifacts.OptimType.SGD
    with tempfile.TemporaryDirectory(dir=out, prefix=".artifacts-") as tmp:
        with _native_log_captured():
            artifacts.generate_artifacts(model, requires_grad=names, loss=None, optimizer=optim, artifact_directory=tmp)
        if optimizer == "adamw":
            path = Path(tmp) / "optimizer_model.onnx"
            onnx.save(patch_adamw(onnx.load(path), config), path)
        files = {}
        for name in ARTIFACT_FILES:
            dest = out / name
            if dest.is_dir():
                shutil.rmtree(dest)
            os.replace(Path(tmp) / name, dest)
            files[name] = dest
    inputs = [n.attrs["name"] for n in graph.nodes() if n.op in ("input", "input_u32")]
    return TrainingArtifacts(out, names, inputs, optimizer, config if optimizer == "adamw" else None, files)


def _quiet_ort_logging() -> None:
    """Keep ORT's default logger at warnings and errors."""
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)


@contextlib.contextmanager
def _native_log_captured() -> Iterator[None]:
    """Hold back what ORT's C++ side writes to stderr while it runs, and show it only on failure.

    The gradient builder in onnxruntime-training 1.19 logs every graph transformer at INFO through a
    logger that ``set_default_logger_severity`` does not reach; on success that is noise, on failure
    it is the evidence, so it is appended to the exception.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as log:
        os.dup2(log.fileno(), 2)
        try:
            yield
        except Exception as e:
            os.dup2(saved, 2)
            log.seek(0)
            tail = log.read().decode(errors="replace").strip().splitlines()[-20:]
            raise RuntimeError(
                f"onnxruntime-training failed to generate the artifacts: {e}\nlast ORT log lines:\n" + "\n".join(tail)
            ) from e
        finally:
            os.dup2(saved, 2)
            os.close(saved)
