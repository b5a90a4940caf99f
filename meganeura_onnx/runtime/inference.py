"""``build_inference_session``: forward-only sessions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..export import to_model
from ..export.precision import HALF_TYPE, half_storage_inputs, lower_precision
from ..graph import Graph
from ..init import default_parameters
from ..transforms.rewrite import optimize as optimize_graph
from .custom_ops import custom_op_library
from .half import check_precision
from .positions import position_rules, upload_limits
from .session import Session
from .values import NUMPY, checked_parameters


def position_limits(graph: Graph) -> dict[str, int]:
    """Largest valid value of each ``input_u32`` that feeds a position input of an op (the op
    table's ``positions``), as ``set_input_u32`` checks it: for the ``kv_pos`` of
    ``cache_write``/``cached_attention`` it is ``max_seq - T`` (rows ``[kv_pos, kv_pos + T)`` must lie
    in the cache); ``rope``'s dynamic offset allows 2**40, more than a U32 holds, so it gets no entry.
    With a symbolic T (a prefill graph of any length) the limit is ``max_seq - 1``; each step then
    checks the exact limit of its sizes (:mod:`meganeura_onnx.runtime.positions`).
    """
    return upload_limits(position_rules(graph))


def build_inference_session(
    graph: Graph,
    device: str = "cpu",
    *,
    providers: Sequence | None = None,
    parameters: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    opset: int | None = None,
    use_custom_ops: bool = True,
    cuda_graph: bool = False,
    check_finite: bool = False,
    optimize: bool = True,
    precision: str = "fp32",
    session_config: Mapping[str, str] | None = None,
    session_options: Mapping[str, object] | None = None,
    merge_projections: bool | None = None,
    add_rms_norm: bool | None = None,
    qkv_rope_cache: bool | None = None,
    swiglu_packed: bool | None = None,
    decode_layer: bool | None = None,
    feedback: Mapping[str, str] | None = None,
) -> Session:
    """Compile ``graph`` for inference on ``device`` ("cpu" or "cuda").

    Parameters start from the documented default init (:mod:`meganeura_onnx.init`, seeded by
    ``seed``) unless given in ``parameters``; ``set_parameter`` overrides them later. Inputs that
    ``cache_write`` updates are KV caches: they start at zero and persist across ``step()`` calls.
    The com.meganeura kernel library is registered when built (``use_custom_ops=False`` runs the
    function bodies instead). ``cuda_graph=True`` (CUDA only) captures the run as a CUDA graph on
    the first ``step()`` and replays it after, removing per-kernel launch cost; it needs every buffer
    to stay put, i.e. KV caches updated in place by the CacheWrite kernel. ``parameters`` are
    checked like ``set_parameter`` (name, shape, dtype, finite). ``check_finite=True`` makes every
    ``step()`` check its inputs and outputs and raise ``FloatingPointError`` naming the first
    non-finite one (it reads every buffer back: for debugging, not for speed). ``optimize`` (default
    True) runs the e-graph optimizer first, with the decode-step fusions that pay on ``device``
    (:func:`_optimized`); its report is the session's ``report`` attribute (``None`` with
    ``optimize=False``). ``merge_projections``: a prefill's q/k/v and gate/up as one product each (None: on CUDA).
    ``add_rms_norm``: a prefill's residual add and the RMSNorm after it as one ``AddRMSNorm``; None
    (default): on CUDA. ``qkv_rope_cache``: a prefill's split of its merged q/k/v product, its ropes and
    cache writes as one ``QKVRopeCacheWrite``; ``swiglu_packed``: its gate|up split and the SwiGLU after it as
    one ``SwiGLUPacked``; None (default, both): on CUDA, and on the CPU with our kernel library.

    ``precision``: ``"fp32"`` (default), ``"tf32"`` (CUDA: TF32 tensor-core MatMul), ``"bf16"`` or
    ``"fp16"``: MatMul/Gemm compute in half with float32 accumulation, the weights they alone read
    and the KV caches of half-capable cache kernels are stored in half (half the memory),
    normalisations, softmax and the rest run in float32 and outputs (logits) come back as float32
    (:mod:`meganeura_onnx.export.precision`; ``session.plan()`` lists each op's precision). In fp16 an
    output its node makes in half (the logits) stays half on the device and is widened when read.
    ``set_parameter`` and ``read_param`` still take and give float32 arrays.

    ``session_config``: ORT session config entries, e.g. ``{"session.intra_op.allow_spinning": "0"}``;
    ``session_options``: ``ort.SessionOptions`` attributes by name, e.g. ``{"intra_op_num_threads": 1}``.
    ``decode_layer``: each decoder layer of a decode step as one ``DecodeLayer``; None (default): on
    CUDA, as the other decode-step fusions; False: off (to compare); True: any device.

    ``feedback``: input -> output; after each ``step()`` the output's value becomes the input's on the
    device (two alternating buffers), e.g. ``{"input_ids": "next_token", "kv_pos": "next_pos"}`` for
    greedy decode steps with nothing uploaded; ``set_input_u32`` still overwrites it. Fed-back positions
    are checked by the kernels only (CUDA: guarded on the device, never out of bounds; CPU: an error).
    """
    check_precision(precision, device, providers, "build_inference_session")
    compiled, report = (
        _optimized(graph, device, merge_projections, decode_layer, providers, use_custom_ops, add_rms_norm, qkv_rope_cache, swiglu_packed)
        if optimize
        else (graph, None)
    )
    model, spec = to_model(compiled, opset=opset, params_as_inputs=True, with_state=True)
    model, half_storage, precisions = _lower_to_half(model, spec, precision, device, providers, use_custom_ops)
    given = checked_parameters(parameters, graph.parameters(), "build_inference_session")
    values = {**default_parameters(graph, seed, skip=set(given)), **given}
    inputs, state, output_types = _inputs_state_outputs(graph, spec, feedback)
    session = Session(
        model, inputs=inputs, persistent=values, state=state, outputs=graph.output_names(), output_types=output_types,
        parameter_names=list(values), device=device, providers=providers, use_custom_ops=use_custom_ops,
        inplace_state=sorted(spec.inplace), cuda_graph=cuda_graph, position_rules=position_rules(graph),
        check_finite=check_finite, half_storage=half_storage, precision=precision, precisions=precisions,
        session_config=session_config, session_options=session_options,
    )  # fmt: skip
    session.report = report
    return session


def _optimized(
    graph: Graph,
    device: str,
    merge_projections: bool | None,
    decode_layer: bool | None,
    providers,
    use_custom_ops: bool,
    add_rms_norm: bool | None = None,
    qkv_rope_cache: bool | None = None,
    swiglu_packed: bool | None = None,
):
    """(graph, report) after the inference optimizer (:mod:`meganeura_onnx.transforms.rewrite`; with
    ``merge_projections`` a prefill's (> 16 or symbolic rows) q/k/v and gate/up run as one product each,
    :mod:`meganeura_onnx.transforms.merge_projections`: by default on CUDA, where a prefill's time is its
    launches; on the CPU the Concat of each group's weights, which runs every time since the weights are
    session inputs, costs more than the one product saves (fp32 SmolLM2-135M 128-row prefill, 2-core VM,
    three runs, medians: 213 / 210 / 186 ms separate against 235 / 222 / 206 merged); ``decode_layer``:
    :mod:`meganeura_onnx.transforms.decode_layer_fusion`). The decode-step fusions (RMSNorm + projection and
    residual GEMVs, rope + attention, whole layers) pay where launches dominate (CUDA); on the CPU, MLAS's
    products are as fast as our GEMV kernels one by one (README, decode-layer fusions), so CPU sessions keep
    the products unless ``decode_layer=True`` asks for the layers, which those fusions make (``LlamaRunner``
    does where our library is loaded: the CPU DecodeLayer runs a layer's loops on one team of threads). The rope + cache
    writes + attention fusion pays on the CPU too when our kernel runs it (one node for four: less ORT
    dispatch and thread-pool work per layer); without the library it stays unfused. A prefill's residual
    add + RMSNorm as one ``AddRMSNorm`` (:mod:`meganeura_onnx.transforms.add_rms_norm_fusion`): on CUDA,
    where it saves the launches of Gemm's C copy and of the norm's half Cast. A prefill's split of its merged
    q/k/v product, ropes and cache writes as one ``QKVRopeCacheWrite``
    (:mod:`meganeura_onnx.transforms.qkv_rope_fusion`): on CUDA, four launches per layer become one; on the CPU
    where our kernel runs it (fp32 SmolLM2-135M 128-row prefill, 2-core VM: no slower, medians 1-5% lower). A
    prefill's split of its merged gate|up product and the SwiGLU after it as one ``SwiGLUPacked``
    (:mod:`meganeura_onnx.transforms.swiglu_packed_fusion`): on CUDA, the Split's launch per layer saved; on the
    CPU where our kernel runs it (fp32 SmolLM2-135M 128-row prefill, 2-core VM, alternating:
    no slower, faster in 74 of 122 pairs, median ratio 0.97)."""
    fused = device == "cuda" or decode_layer is True
    layers = fused if decode_layer is None else decode_layer
    on_cpu = device == "cpu" and providers is None
    cpu_kernels = on_cpu and use_custom_ops and custom_op_library("cpu") is not None
    rope_attention = fused or cpu_kernels
    return optimize_graph(
        graph,
        stage="inference",
        decode_fusion=fused,
        rope_attention=rope_attention,
        merge_projections=device == "cuda" if merge_projections is None else merge_projections,
        decode_layer=layers,
        add_rms_norm=device == "cuda" if add_rms_norm is None else add_rms_norm,
        qkv_rope_cache=(device == "cuda" or cpu_kernels) if qkv_rope_cache is None else qkv_rope_cache,
        swiglu_packed=(device == "cuda" or cpu_kernels) if swiglu_packed is None else swiglu_packed,
    )


def _lower_to_half(model, spec, precision: str, device: str, providers, use_custom_ops: bool):
    """(model, half_storage, precisions): ``model`` lowered to ``precision`` (``"bf16"``/``"fp16"``; as it is otherwise),
    the inputs and outputs it stores in half (name -> element type) and each node's precision for ``plan()``.

    fp16 outputs made in half (the LM head's logits) stay half: a Cast to float32 per step cost ~1.5 us
    of an H200 decode step, and numpy reads float16 as it is. bf16 ones are cast in the graph: numpy has
    no bfloat16, so each read would run a cast on the device instead."""
    if precision not in HALF_TYPE:
        return model, {}, []
    target = "cuda" if device == "cuda" and providers is None else "cpu"
    kernels = use_custom_ops and custom_op_library(target) is not None
    stored = half_storage_inputs(model, precision, target, [*spec.parameters, *spec.state], kernels)
    half_outputs = [spec.state[n] for n in stored if n in spec.state]
    model, lowered = lower_precision(
        model, precision, device=target, half_inputs=stored, half_outputs=half_outputs, custom_kernels=kernels,
        outputs_as_made=precision == "fp16",
    )  # fmt: skip
    made_half = set(lowered.half_outputs) - set(half_outputs)
    return model, dict.fromkeys([*stored, *sorted(made_half)], HALF_TYPE[precision]), lowered.nodes


def _zero_state(spec, types: Mapping) -> dict[str, tuple[str, np.ndarray]]:
    """The session state (KV caches): input name -> (the output that updates it, zeros of its shape)."""
    for name in spec.state:
        if not types[name].is_static():
            raise ValueError(
                f"build_inference_session: KV-cache input {name!r} must have a static shape (it is session state), got {list(types[name].shape)}"
            )
    return {name: (out, np.zeros(types[name].shape, np.float32)) for name, out in spec.state.items()}


def _inputs_state_outputs(graph: Graph, spec, feedback: Mapping[str, str] | None) -> tuple[dict, dict, dict]:
    """The session's runtime inputs, its state (KV caches, fed-back inputs) and every output's type."""
    types = {n.attrs["name"]: n.ty for n in graph.nodes() if n.op in ("input", "input_u32")}
    output_types = {name: graph.node(nid).ty for name, nid in zip(graph.output_names(), graph.outputs(), strict=True)}
    state = {**_zero_state(spec, types), **_feedback_state(feedback, types, output_types, spec.state)}
    output_types.update({out: types[name] for name, out in spec.state.items()})
    return {k: v for k, v in types.items() if k not in state}, state, output_types


def _feedback_state(
    feedback: Mapping[str, str] | None, types: Mapping, output_types: Mapping, cache_state: Mapping[str, str]
) -> dict[str, tuple[str, np.ndarray]]:
    """The session state for ``feedback`` (input -> the output that feeds it), checked: a static
    input that is no KV cache, a graph output of the same shape and element type, each once."""
    if feedback is None:
        return {}
    if not isinstance(feedback, Mapping):
        raise TypeError(f"build_inference_session: feedback must be a dict input name -> output name, got {type(feedback).__name__}")
    state: dict[str, tuple[str, np.ndarray]] = {}
    for name, out in feedback.items():
        where = f"build_inference_session: feedback {name!r} -> {out!r}"
        if name not in types or name in cache_state:
            raise ValueError(f"{where}: {name!r} is not an input of the graph (inputs: {sorted(set(types) - set(cache_state))})")
        if out not in output_types:
            raise ValueError(f"{where}: {out!r} is not an output of the graph (outputs: {sorted(output_types)})")
        ty, out_ty = types[name], output_types[out]
        if not ty.is_static() or ty != out_ty:
            raise ValueError(
                f"{where}: the input is {ty.dtype.name} {list(ty.shape)}, the output {out_ty.dtype.name} {list(out_ty.shape)}; they must be equal and static"
            )
        if list(feedback.values()).count(out) > 1:
            raise ValueError(f"{where}: {out!r} feeds more than one input")
        state[name] = (out, np.zeros(ty.shape, NUMPY[ty.dtype]))
    return state
