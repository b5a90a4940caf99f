"""The C++ kernels agree with the op table's ``com.meganeura`` schemas (``OpDef.custom``).

Four checks, each able to fail when either side changes:
- the registration rows (``new OpDef("Rope", ep, {T, ANY}, {T}, {false, true}, ...)`` in
  ``cpu_kernels.cc`` and ``cuda_ops.cc``) against the schema's inputs, outputs, optional inputs and
  in-place input, and the element types a row is registered for (``T`` of its enclosing
  ``for (const auto T : {F32, F16, BF16})``, or F32 written out) against float + the op's ``half_types``;
- the element types the built CPU library has kernels for (a session per type) against the same;
- the attributes the kernels read (``AttrInt``/``AttrFloat`` calls) against the schema's attributes
  (name, int/float, required or with a default);
- the values the built CPU library accepts for each attribute (probed at its range edges, by
  creating an ONNX Runtime session on a one-node model) against what the schema accepts.
The last tests mutate one side (a copy of the C++ text, a copy of the schema) and check that the
comparison reports the disagreement.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import kernel_cases as kc
import pytest
from conftest import build_example
from onnx import TensorProto, helper

from meganeura_onnx.export import to_model
from meganeura_onnx.ops import OPS
from meganeura_onnx.ops.table import INT64_MAX, Attr, CustomOp

KERNEL_DIR = Path(__file__).resolve().parent.parent / "custom_ops"
# Each execution provider's registration rows, spread over the files that hold its kernel classes.
REGISTRY_FILES = {
    "CPU": (
        "cpu_kernels.cc",
        "cpu_fused.cc",
        "cpu_rope_attention.cc",
        "cpu_flash.cc",
        "cpu_decode_linear.cc",
        "cpu_decode_layer.cc",
        "cpu_losses.cc",
        "decode_layer.cc",
    ),
    # cpu_losses.cc: the sparse cross entropy's one registration (AddCrossEntropyOps), which both
    # libraries call with their kernels' factories; decode_layer.cc: DecodeLayer's descriptor (NewDecodeLayerOpDef).
    "CUDA": (
        "cuda_ops.cc",
        "cuda_fused_ops.cc",
        "cuda_flash_ops.cc",
        "cuda_decode_linear_ops.cc",
        "cuda_decode_layer_ops.cc",
        "cuda_losses_ops.cc",
        "cpu_losses.cc",
        "decode_layer.cc",
    ),
}
ATTR_FILES = (
    "op_common.cc",
    "op_checks.cc",
    "decode_layer.cc",
    "cpu_kernels.cc",
    "cuda_ops.cc",
    "optim_kernels.cc",
    "cpu_fused.cc",
    "cpu_rope_attention.cc",
    "cpu_flash.cc",
    "cpu_decode_linear.cc",
    "cpu_losses.cc",
)
SCHEMAS = {d.custom.name: d.custom for d in OPS.values() if d.custom is not None}
# Rows of variadic ops (AdamUpdate) are built in code, not in the one-line form parsed here; their
# attributes and accepted values are still checked below, their arity by their own kernel tests.
FIXED_ARITY = {name: s for name, s in SCHEMAS.items() if not s.variadic_inputs}
# T: the float type of a per-type registration loop; FP32: float32 whatever T is (a log-sum-exp).
C_TYPE = {"F32": "float", "T": "float", "FP32": "float32", "ANY": "index", "U32": "uint32"}
C_ELEMENT = {"F32": "float", "F16": "float16", "BF16": "bfloat16"}
HALF_TYPES = {d.custom.name: d.half_types for d in OPS.values() if d.custom is not None}
TYPE_LOOP = re.compile(r"for \(const auto T : \{(?P<types>[^}]*)\}\) \{(?P<body>.*?)\n  \}", re.S)

ROW = re.compile(
    r"new OpDef\(\"(?P<name>\w+)\",\s*ep,\s*\{(?P<ins>[^}]*)\},\s*\{(?P<outs>[^}]*)\},\s*\{(?P<opt>[^}]*)\},\s*"
    r"\{(?P<cpu>[^}]*)\},\s*[\w:]+,\s*(?P<shape_from>-?\d+)(?:,\s*/\*cache_inplace=\*/(?P<inplace>true|false))?\)"
)
# A row followed by this call registers outputs 1 and 2 as inputs 3 and 4 written in place (op_common.h); with
# /*k_cache_input=*/i, as inputs i and i + 1 (QKVRopeCacheWrite: 1 and 2).
KV_CACHE_OUTPUTS = re.compile(r"\)\);\s*ops->back\(\)->UseKvCacheOutputs\((?:/\*k_cache_input=\*/\d+)?\);")
# Rows an op's descriptor function builds (DecodeLayer's 13 inputs: NewDecodeLayerOpDef in decode_layer.cc),
# registered by a call per element type. Their element types are checked here, their in-place caches by
# the descriptor's UseKvCacheOutputs call, their inputs and outputs by the library probes below.
FACTORY_CALL = re.compile(r"New(?P<name>\w+)OpDef\((?:ep|\"\w+ExecutionProvider\"),\s*T,")
# A type loop whose body is one statement, without braces (cuda_decode_layer_ops.cc).
TYPE_LOOP_ONE = re.compile(r"for \(const auto T : \{(?P<types>[^}]*)\}\)(?:\s*//[^\n]*)?\n(?P<body>[^\n]*\n?[^\n]*;)")
DESCRIPTOR = re.compile(r"OpDef\* New(?P<name>\w+)OpDef\(const char\* ep,[^{]*\{(?P<body>.*?)\n\}", re.S)
BUILT_IN_CODE = frozenset({"DecodeLayer"})
ATTR_READ = re.compile(r"Attr(?P<kind>Int|Float)\(info,\s*\"(?P<op>\w+)\",\s*\"(?P<attr>\w+)\",\s*[^,]+,\s*(?P<dflt>nullptr|&\w+)\)")


def _items(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def registered_element_types(source: str) -> dict[str, set[str]]:
    """op name -> the float element types its rows in ``source`` are registered for."""
    types: dict[str, set[str]] = {}
    for loop in (*TYPE_LOOP.finditer(source), *TYPE_LOOP_ONE.finditer(source)):
        for m in (*ROW.finditer(loop["body"]), *FACTORY_CALL.finditer(loop["body"])):
            types[m["name"]] = {C_ELEMENT[t] for t in _items(loop["types"])}
    for m in ROW.finditer(source):
        if m["name"] not in types and "F32" in m["ins"] + m["outs"]:
            types[m["name"]] = {"float"}
    return types


def registry_disagreements(
    source: str, schemas: dict[str, CustomOp], where: str, half_types: dict[str, frozenset[str]] = HALF_TYPES
) -> list[str]:
    """Differences between the registration rows in ``source`` and the schemas (and their half_types)."""
    rows = {m["name"]: m for m in ROW.finditer(source)}
    kv_outputs = {m["name"] for m in ROW.finditer(source) if KV_CACHE_OUTPUTS.match(source, m.end() - 1)}
    element_types = registered_element_types(source)
    problems = (
        [f"{where}: registers {sorted(set(rows) - set(SCHEMAS))}, which the op table does not declare"] if set(rows) - set(SCHEMAS) else []
    )
    descriptors = {m["name"]: m["body"] for m in DESCRIPTOR.finditer(source)}
    for name, schema in schemas.items():
        if name in BUILT_IN_CODE:
            problems += _descriptor_disagreements(name, schema, descriptors.get(name), element_types.get(name), half_types, where)
            continue
        if name not in rows:
            problems.append(f"{where}: no registration row for {name}")
            continue
        row = rows[name]
        ins = [C_TYPE.get(t, t) for t in _items(row["ins"])]
        outs = [C_TYPE.get(t, t) for t in _items(row["outs"])]
        optional = [t == "true" for t in _items(row["opt"])]
        if ins != [t.dtype for t in schema.inputs]:
            problems.append(f"{where}: {name} inputs are {ins}, the table says {[t.dtype for t in schema.inputs]}")
        if outs != [t.dtype for t in schema.outputs]:
            problems.append(f"{where}: {name} outputs are {outs}, the table says {[t.dtype for t in schema.outputs]}")
        if optional != [t.optional for t in schema.inputs]:
            problems.append(f"{where}: {name} optional inputs are {optional}, the table says {[t.optional for t in schema.inputs]}")
        want_types = {"float", *half_types.get(name, ())} if any(t.dtype == "float" for t in (*schema.inputs, *schema.outputs)) else set()
        if element_types.get(name, set()) != want_types:
            problems.append(
                f"{where}: {name} is registered for {sorted(element_types.get(name, set()))}, the table says {sorted(want_types)}"
            )
        pairs = (("k_cache", "k_cache_out"), ("v_cache", "v_cache_out")) if name in kv_outputs else ()
        if pairs != schema.inplace_pairs:
            problems.append(f"{where}: {name} writes {list(pairs)} in place, the table's in-place pairs are {list(schema.inplace_pairs)}")
        inplace = row["inplace"] == "true"
        if inplace != (schema.inplace_input is not None):
            problems.append(f"{where}: {name} cache_inplace={inplace}, the table's in-place input is {schema.inplace_input}")
        elif inplace and int(row["shape_from"]) != [t.name for t in schema.inputs].index(schema.inplace_input):
            problems.append(f"{where}: {name} output 0 takes the shape of input {row['shape_from']}, not of {schema.inplace_input}")
    return problems


def _descriptor_disagreements(name: str, schema: CustomOp, body: str | None, types: set[str] | None, half_types, where: str) -> list[str]:
    """An op whose rows its descriptor function builds: registered per element type, in place as the schema says."""
    if body is None or types is None:
        return [f"{where}: no registration of {name} (New{name}OpDef(ep, T, ...) in a type loop, and its definition)"]
    problems = []
    if types != {"float", *half_types.get(name, ())}:
        problems.append(f"{where}: {name} is registered for {sorted(types)}, the table says {sorted({'float', *half_types.get(name, ())})}")
    if ("UseKvCacheOutputs(" in body) != bool(schema.inplace_pairs):
        problems.append(
            f"{where}: {name}'s descriptor writes caches in place: {'UseKvCacheOutputs(' in body}, the table's in-place pairs are {list(schema.inplace_pairs)}"
        )
    return problems


def attribute_disagreements(sources: dict[str, str], schemas: dict[str, CustomOp]) -> list[str]:
    """Differences between the attributes the kernels read and the schemas' attributes."""
    read: dict[tuple[str, str], tuple[str, bool]] = {}
    problems = []
    for where, text in sources.items():
        for m in ATTR_READ.finditer(text):
            key, value = (m["op"], m["attr"]), (m["kind"].lower(), m["dflt"] == "nullptr")
            if read.setdefault(key, value) != value:
                problems.append(f"{where}: {key[0]}.{key[1]} is read as {value}, elsewhere as {read[key]}")
    for name, schema in schemas.items():
        declared = {a.name: (a.kind, a.required) for a in schema.attrs}
        kernel = {attr: v for (op, attr), v in read.items() if op == name}
        for attr in sorted(set(declared) | set(kernel)):
            if declared.get(attr) != kernel.get(attr):
                problems.append(
                    f"{name}.{attr}: the kernels read (kind, required) = {kernel.get(attr)}, the table declares {declared.get(attr)}"
                )
    return problems


def _sources(files) -> dict[str, str]:
    return {f: (KERNEL_DIR / f).read_text() for f in files}


def _registry(ep: str) -> str:
    return "\n".join(_sources(REGISTRY_FILES[ep]).values())


def test_kernel_registration_rows_match_the_op_table():
    problems = [p for ep, files in REGISTRY_FILES.items() for p in registry_disagreements(_registry(ep), FIXED_ARITY, " + ".join(files))]
    assert not problems, "\n".join(problems)


def test_attributes_the_kernels_read_match_the_op_table():
    problems = attribute_disagreements(_sources(ATTR_FILES), SCHEMAS)
    assert not problems, "\n".join(problems)


# -- the built library: which element types and attribute values does it accept? ---------------------
ONNX_ELEMENT = {"float": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}


def library_element_types(op_name: str) -> set[str]:
    """The float element types for which the CPU library gives ``op_name``'s custom op a kernel: a
    one-node model per type (float inputs/outputs of that type, int64 indices, uint32 tokens), a session for
    each."""
    schema = OPS[op_name].custom
    _, example = _custom_model(op_name)
    accepted = set()
    for name, elem in ONNX_ELEMENT.items():
        kind = {"float": elem, "float32": TensorProto.FLOAT, "index": TensorProto.INT64, "uint32": TensorProto.UINT32}
        ins = [helper.make_tensor_value_info(t.name, kind[t.dtype], None) for t in schema.inputs]
        outs = [helper.make_tensor_value_info(t.name, kind[t.dtype], None) for t in schema.outputs]
        node = helper.make_node(schema.name, [t.name for t in schema.inputs], [t.name for t in schema.outputs], domain=schema.domain)
        node.attribute.extend(example.attribute)
        model = helper.make_model(
            helper.make_graph([node], "types", ins, outs),
            opset_imports=[helper.make_opsetid("", kc.OPSET), helper.make_opsetid(schema.domain, 1)],
        )
        model.ir_version = 10
        try:
            kc.session(model.SerializeToString(), library=kc.kernel_library("cpu"))
        except Exception as e:  # noqa: BLE001 - ORT reports a missing kernel as a generic exception
            # no kernel of that type ("Could not find an implementation"), or a type no registration has
            if "implementation" not in str(e) and "Type Error" not in str(e):
                raise
            continue
        accepted.add(name)
    return accepted


@pytest.mark.skipif(kc.kernel_library("cpu") is None, reason="custom-op library not built (make -C custom_ops cpu)")
@pytest.mark.parametrize("op_name", [n for n, d in OPS.items() if d.custom is not None and d.custom.name in FIXED_ARITY])
def test_the_cpu_library_has_kernels_for_exactly_the_declared_element_types(op_name):
    assert library_element_types(op_name) == {"float", *OPS[op_name].half_types}


def probe_values(a: Attr) -> list:
    """Values at and around the edges of what ``a`` accepts (plus a few clearly bad ones)."""
    if a.kind == "float":
        vals = [1.0, -1.0, 0.0, 1e-30, 3.0e38, float("inf"), float("nan")]
    else:
        lo = 0 if a.lo is None else int(a.lo)
        vals = [lo - 1, lo, lo + 1, 7, 4096]
        if a.hi is not None and a.hi != INT64_MAX:
            vals += [int(a.hi) - 1, int(a.hi), int(a.hi) + 1]
    return sorted(set(vals), key=repr)


def _accepts(a: Attr, value) -> bool:
    try:
        a.check("probe", value)
    except (TypeError, ValueError):
        return False
    return True


def _relations_hold(schema: CustomOp, attrs: dict) -> bool:
    return all(eval(rel, {}, dict(attrs)) for rel in schema.relations)  # noqa: S307 - the table's own expressions


def _custom_model(op_name: str):
    g, f = build_example(OPS[op_name].examples[0])
    model, _ = to_model(g, parameters=f.params)
    node = next(n for n in model.graph.node if n.domain == "com.meganeura")
    return model, node


def _library_accepts(model, node, attr: str, value) -> tuple[bool, str]:
    """Set ``attr`` (None: remove it) and try to create a session with the CPU kernels registered."""
    for a in list(node.attribute):
        if a.name == attr:
            node.attribute.remove(a)
    if value is not None:
        node.attribute.append(helper.make_attribute(attr, value))
    try:
        kc.session(model.SerializeToString(), library=kc.kernel_library("cpu"))
    except Exception as e:  # noqa: BLE001 - ORT reports kernel-creation errors as generic exceptions
        return False, str(e)
    return True, ""


def library_disagreements(schemas: dict[str, CustomOp]) -> list[str]:
    problems = []
    for op_name, d in OPS.items():
        if d.custom is None or d.custom.name not in schemas:
            continue
        schema = schemas[d.custom.name]
        model, node = _custom_model(op_name)
        original = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        for a in schema.attrs:
            for value in [*probe_values(a), None]:
                want = not a.required if value is None else _accepts(a, value) and _relations_hold(schema, {**original, a.name: value})
                got, why = _library_accepts(model, node, a.name, value)
                if got != want:
                    verdict = "accepts" if got else f"refuses ({why[-120:]})"
                    problems.append(
                        f"{schema.name}.{a.name} = {value!r}: the kernel {verdict}, the table {'accepts' if want else 'refuses'}"
                    )
            _library_accepts(model, node, a.name, original.get(a.name))
    return problems


@pytest.mark.skipif(kc.kernel_library("cpu") is None, reason="custom-op library not built (make -C custom_ops cpu)")
def test_the_cpu_kernels_accept_exactly_the_attribute_values_the_table_accepts():
    problems = library_disagreements(SCHEMAS)
    assert not problems, "\n".join(problems)


# -- the checks catch a change on either side -----------------------------------------------------------
def test_a_changed_registration_row_is_caught():
    text = _registry("CPU")
    assert not registry_disagreements(text, FIXED_ARITY, "cpu_kernels.cc")
    mutated = text.replace('new OpDef("Rope", ep, {T, ANY}, {T}, {false, true}', 'new OpDef("Rope", ep, {T, ANY}, {T}, {false, false}', 1)
    assert mutated != text
    assert any("Rope optional inputs" in p for p in registry_disagreements(mutated, FIXED_ARITY, "cpu_kernels.cc"))


def test_a_changed_element_type_list_is_caught():
    text = _registry("CPU")
    mutated = text.replace("for (const auto T : {F32, F16, BF16})", "for (const auto T : {F32, F16})", 1)
    assert mutated != text
    problems = registry_disagreements(mutated, FIXED_ARITY, "cpu_kernels.cc")
    assert any("Rope is registered for ['float', 'float16']" in p for p in problems), problems
    fewer = {**HALF_TYPES, "CachedAttention": frozenset({"float16"})}
    assert any("CachedAttention is registered for" in p for p in registry_disagreements(text, FIXED_ARITY, "cpu_kernels.cc", fewer))


def test_a_changed_schema_is_caught_by_the_registry_and_attribute_checks():
    rope = SCHEMAS["Rope"]
    extra_input = {**FIXED_ARITY, "Rope": dataclasses.replace(rope, inputs=(*rope.inputs, rope.inputs[0]))}
    text = _registry("CPU")
    assert any("Rope inputs" in p for p in registry_disagreements(text, extra_input, "cpu_kernels.cc"))
    renamed = {**SCHEMAS, "Rope": dataclasses.replace(rope, attrs=(dataclasses.replace(rope.attrs[0], name="base"), *rope.attrs[1:]))}
    problems = attribute_disagreements(_sources(ATTR_FILES), renamed)
    assert any("Rope.base" in p for p in problems) and any("Rope.theta" in p for p in problems)


def test_a_changed_attribute_read_is_caught():
    sources = _sources(ATTR_FILES)
    sources["op_checks.cc"] = sources["op_checks.cc"].replace(
        'AttrInt(info, "Rope", "offset", &a->offset, &zero)', 'AttrInt(info, "Rope", "offset", &a->offset, nullptr)'
    )
    assert any("Rope.offset" in p for p in attribute_disagreements(sources, SCHEMAS))


@pytest.mark.skipif(kc.kernel_library("cpu") is None, reason="custom-op library not built (make -C custom_ops cpu)")
def test_a_changed_attribute_range_is_caught_by_probing_the_library():
    rope = SCHEMAS["Rope"]
    head_dim = next(a for a in rope.attrs if a.name == "head_dim")
    wider = dataclasses.replace(head_dim, hi=2048)
    mutated = {"Rope": dataclasses.replace(rope, attrs=tuple(wider if a is head_dim else a for a in rope.attrs))}
    problems = library_disagreements(mutated)
    assert any(p.startswith("Rope.head_dim = 2048: the kernel refuses") for p in problems), problems


def test_a_changed_descriptor_registration_is_caught():
    """DecodeLayer's rows come from NewDecodeLayerOpDef: a type left out of its loop, or its caches no
    longer registered in place, is reported; and a registry without the op reports it missing."""
    text = _registry("CPU")
    call = "for (const auto T : {F32, F16, BF16}) {  // one registration per element type (the table's half_types)\n    ops->push_back(NewDecodeLayerOpDef"
    assert call in text
    fewer = text.replace(call, call.replace("F32, F16, BF16", "F32, F16"))
    assert any("DecodeLayer is registered for ['float', 'float16']" in p for p in registry_disagreements(fewer, FIXED_ARITY, "cpu"))
    copied = text.replace("def->UseKvCacheOutputs(kDlKCache);", "")
    assert any("DecodeLayer's descriptor writes caches in place: False" in p for p in registry_disagreements(copied, FIXED_ARITY, "cpu"))
    missing = text.replace("NewDecodeLayerOpDef(ep, T,", "NewOtherOpDef(ep, T,")
    assert any("no registration of DecodeLayer" in p for p in registry_disagreements(missing, FIXED_ARITY, "cpu"))
