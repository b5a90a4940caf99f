"""A Graph in an egglog e-graph: the term language, the op table's rules, saturation, read-back.

The term language has one sort ``T`` and one constructor per op of the table and arity
(``Op_matmul T T String``; ops with optional inputs get one constructor per arity, ``Op_rope_1``),
plus ``Leaf i64`` for the graph's leaves and ``Ref i64`` naming the e-class of node ``i``. The last
``String`` argument of every op holds its attributes as a canonical key (``"{'trans_b': True}"``); a
node whose op writes a buffer in place (``inplace_input`` in the table: ``cache_write``) gets a key of its own so two of them are
never merged.

Nodes go in as rows of one relation per constructor (``(in_Op_mul 12 3 4 "{}")``: node 12 multiplies
nodes 3 and 4), read from tab-separated files with egglog's ``input`` command, and one rule per
constructor turns every row into ``(union (Ref 12) (Op_mul (Ref 3) (Ref 4) "{}"))``. Loading a
10,000-node graph this way takes ~0.1 s; one ``set`` command per node costs ~0.3 ms each.

The rewrite rules come from the op table (``OpDef.rewrite``); :func:`rule_program` translates their
s-expressions over op names into egglog ``rewrite`` commands.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..ir import Node
from ..ops import OPS
from ..ops.table import OpDef, Rewrite

RULESET = "optimize"


# -- attributes as canonical strings ------------------------------------------------------------------
class AttrKeys:
    """Attribute dicts <-> the String argument of an e-node.

    Plain literal attributes (bools, numbers, strings, tuples) become ``repr`` of the sorted dict, so
    rules can write them; anything else (numpy values) and in-place ops get an opaque ``@k`` key.
    """

    def __init__(self) -> None:
        self._by_key: dict[str, dict[str, Any]] = {}
        self._plain: dict[str, bool] = {}  # repr -> whether it reads back as the same dict
        self._unique = 0

    def key(self, attrs: dict[str, Any], unique: bool = False) -> str:
        text = repr(dict(sorted(attrs.items())))
        if not unique and self._is_plain(text, attrs):
            return text
        self._unique += 1
        key = f"@{self._unique}"
        self._by_key[key] = dict(attrs)
        return key

    def _is_plain(self, text: str, attrs: dict[str, Any]) -> bool:
        if text not in self._plain:
            plain = False
            if '"' not in text and "\\" not in text:
                try:
                    plain = ast.literal_eval(text) == attrs
                except (ValueError, SyntaxError):
                    pass
            self._plain[text] = plain
            if plain:
                self._by_key[text] = dict(attrs)
        return self._plain[text]

    def attrs(self, key: str) -> dict[str, Any]:
        if key not in self._by_key:  # written by a rule
            self._by_key[key] = ast.literal_eval(key)
        return dict(self._by_key[key])


def writes_in_place(d: OpDef) -> bool:
    """Ops whose node updates a buffer in place (the table's ``inplace_input``): never merged with an
    equal-looking node."""
    return d.writes_in_place()


def arities(d: OpDef) -> range:
    """Input counts a rule may give the op (its trailing ``optional_inputs`` may be left out)."""
    return range(len(d.inputs) - len(d.optional_inputs), len(d.inputs) + 1)


def constructor(op_name: str, arity: int) -> str:
    return f"Op_{op_name}" if arity == len(OPS[op_name].inputs) else f"Op_{op_name}_{arity}"


def used_constructors(nodes: list[Node], rules: list[Rewrite]) -> set[tuple[str, int]]:
    """(op, arity) of every non-leaf node and of every op the rules mention (all its arities)."""
    used = {(n.op, len(n.inputs)) for n in nodes if not OPS[n.op].leaf}
    for r in rules:
        for name in re.findall(r"\(\s*([^\s(){}?]+)", r.lhs + " " + r.rhs):
            if name in OPS and not OPS[name].leaf:
                used.update((name, k) for k in arities(OPS[name]))
    return used


def declarations(used: set[tuple[str, int]]) -> str:
    """The datatype with the ``used`` (op, arity) constructors, the input relations, the loading rules."""
    ctors = ["(Ref i64)", "(Leaf i64)"]
    lines = ["(relation in_Leaf (i64))"]
    load = ['(rule ((in_Leaf id)) ((union (Ref id) (Leaf id))) :ruleset load :name "load Leaf")']
    order = {name: k for k, name in enumerate(OPS)}
    for op_name, n in sorted(used, key=lambda u: (order[u[0]], u[1])):
        c = constructor(op_name, n)
        ctors.append(f"({c}{' T' * n} String)")
        lines.append(f"(relation in_{c} (i64{' i64' * n} String))")
        args = [f"a{k}" for k in range(n)]
        refs = "".join(f" (Ref {a})" for a in args)
        load.append(f'(rule ((in_{c} id {" ".join(args)} s)) ((union (Ref id) ({c}{refs} s))) :ruleset load :name "load {c}")')
    head = [f"(datatype T {' '.join(ctors)})", f"(ruleset {RULESET})", "(ruleset load)"]
    return "\n".join(head + lines + load) + "\n"


# -- rules ------------------------------------------------------------------------------------------
_TOKEN = re.compile(r"\s*(?:(\()|(\))|(\{)|([^\s(){}]+))")


def _parse_sexpr(text: str, rule: str) -> Any:
    """Nested lists of atoms; ``{...}`` (balanced braces) is one atom (an attribute literal)."""
    stack: list[list] = [[]]
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if not m:
            raise ValueError(f"rewrite {rule!r}: cannot read {text[pos:]!r}")
        if m.group(1):
            stack.append([])
        elif m.group(2):
            if len(stack) < 2:
                raise ValueError(f"rewrite {rule!r}: unbalanced ')' in {text!r}")
            done = stack.pop()
            stack[-1].append(done)
        elif m.group(3):
            depth, end = 0, m.start(3)
            while end < len(text):
                depth += {"{": 1, "}": -1}.get(text[end], 0)
                end += 1
                if depth == 0:
                    break
            stack[-1].append(("attrs", text[m.start(3) + 1 : end - 1].strip()))
            pos = end
            continue
        else:
            stack[-1].append(m.group(4))
        pos = m.end()
    if len(stack) != 1 or len(stack[0]) != 1:
        raise ValueError(f"rewrite {rule!r}: expected one s-expression, got {text!r}")
    return stack[0][0]


class _RuleWriter:
    """One rule's s-expressions -> egglog terms over the constructors."""

    def __init__(self, rule: Rewrite, keys: AttrKeys) -> None:
        self.rule, self.keys, self.fresh, self.lhs_vars = rule, keys, 0, set()

    def term(self, sexpr: Any, lhs: bool) -> str:
        name = self.rule.name
        if isinstance(sexpr, str):
            if not re.fullmatch(r"\?[A-Za-z_][A-Za-z0-9_]*", sexpr):
                raise ValueError(f"rewrite {name!r}: expected a ?variable or (op ...), got {sexpr!r}")
            return self.var(sexpr, lhs)
        if not sexpr or not isinstance(sexpr[0], str) or sexpr[0] not in OPS or OPS[sexpr[0]].leaf:
            raise ValueError(f"rewrite {name!r}: {sexpr[0] if sexpr else '()'!r} is not an op of the table")
        op_name, args = sexpr[0], list(sexpr[1:])
        attrs = args.pop() if args and isinstance(args[-1], tuple) else None
        if len(args) not in arities(OPS[op_name]):
            raise ValueError(f"rewrite {name!r}: {op_name} takes {list(OPS[op_name].inputs)}, got {len(args)} arguments")
        children = " ".join(self.term(a, lhs) for a in args)
        return f"({constructor(op_name, len(args))} {children} {self.attr_term(attrs, lhs)})"

    def var(self, v: str, lhs: bool) -> str:
        if lhs:
            self.lhs_vars.add(v)
        elif v not in self.lhs_vars:
            raise ValueError(f"rewrite {self.rule.name!r}: {v} on the right side is not bound on the left")
        return v

    def attr_term(self, attrs: tuple | None, lhs: bool) -> str:
        if attrs is None:
            if not lhs:
                return '"{}"'
            self.fresh += 1
            return f"?_attrs{self.fresh}"
        text = attrs[1]
        if text.startswith("?"):
            return self.var(text, lhs)
        value = ast.literal_eval("{" + text + "}")
        key = self.keys.key(value)
        if key.startswith("@"):
            raise ValueError(f"rewrite {self.rule.name!r}: attributes {{{text}}} must be plain literals")
        return f'"{key}"'


def table_rules() -> list[Rewrite]:
    """Every rule of the op table, checked for unique names."""
    rules: list[Rewrite] = []
    seen: dict[str, str] = {}
    for d in OPS.values():
        for r in d.rewrites:
            if r.name in seen:
                raise ValueError(f"rewrite {r.name!r} is declared twice (ops {seen[r.name]!r} and {d.name!r})")
            seen[r.name] = d.name
            rules.append(r)
    return rules


def rule_program(rules: list[Rewrite], keys: AttrKeys) -> str:
    """The egglog ``rewrite`` commands of ``rules``."""
    out = []
    for r in rules:
        w = _RuleWriter(r, keys)
        lhs = w.term(_parse_sexpr(r.lhs, r.name), True)
        if lhs.startswith("?"):
            raise ValueError(f"rewrite {r.name!r}: the left side must be an op, got {r.lhs!r}")
        rhs = w.term(_parse_sexpr(r.rhs, r.name), False)
        out.append(f'(rewrite {lhs} {rhs} :ruleset {RULESET} :name "{r.name}")')
    return "\n".join(out) + "\n"


# -- the graph as rows ------------------------------------------------------------------------------
def node_rows(nodes: list[Node], keys: AttrKeys, node_keys: dict[int, str]) -> dict[str, list[str]]:
    """Relation name -> tab-separated rows, one per node (leaves: ``in_Leaf``); fills ``node_keys``."""
    rows: dict[str, list[str]] = {}
    for n in nodes:
        d = OPS[n.op]
        if d.leaf:
            rows.setdefault("in_Leaf", []).append(str(n.id))
            continue
        key = node_keys[n.id] = keys.key(n.attrs, unique=writes_in_place(d))
        cells = [str(n.id), *(str(i) for i in n.inputs), key]
        rows.setdefault(f"in_{constructor(n.op, len(n.inputs))}", []).append("\t".join(cells))
    return rows


def facts_text(rows: dict[str, list[str]], limit: int | None = None) -> str:
    """The rows as egglog facts (what the ``input`` files hold), at most ``limit`` of them."""
    lines = []
    for rel, rs in rows.items():
        for r in rs:
            cells = r.split("\t")
            if rel != "in_Leaf":
                cells[-1] = '"' + cells[-1] + '"'
            lines.append(f"({rel} {' '.join(cells)})")
    total = len(lines)
    if limit is not None and total > limit:
        lines = lines[:limit] + [f";; ... {total - limit} more facts"]
    return "\n".join(lines) + "\n"


# -- saturation and read-back -----------------------------------------------------------------------
@dataclass
class Limits:
    """When saturation stops: after ``iterations`` rounds, past ``enodes`` e-nodes (default: 4 per
    graph node + 1000) or after ``seconds`` (checked between rounds)."""

    iterations: int = 12
    enodes: int | None = None
    seconds: float = 2.0


@dataclass
class ENode:
    eclass: int
    op: str | None  # None for a leaf (``Leaf i``)
    children: tuple[int, ...]
    attrs_key: str | None  # the leaf's node id for leaves
    leaf_id: int | None = None


@dataclass
class Saturated:
    """The e-graph after saturation, read back into Python."""

    enodes: list[ENode]
    node_class: dict[int, int]  # graph NodeId -> e-class
    num_classes: int
    matches: dict[str, int]
    iterations: int
    stop_reason: str
    seconds: float
    program: str = ""
    keys: AttrKeys = field(default_factory=AttrKeys)
    node_keys: dict[int, str] = field(default_factory=dict)  # graph NodeId -> its attributes' key


def egglog_bindings() -> Any:
    """egglog's compiled extension (``egglog.bindings``), loaded without the package's ``__init__``.

    ``import egglog`` first imports its high-level Python DSL (~1.2 s); we only use the extension
    (~0.07 s). It is registered under its own name, so a later ``import egglog`` reuses it.
    """
    if "egglog.bindings" in sys.modules:
        return sys.modules["egglog.bindings"]
    spec = importlib.util.find_spec("egglog")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("optimize: the egglog package is not installed (pip install egglog)")
    for folder in spec.submodule_search_locations:
        for path in sorted(Path(folder).glob("bindings.*")):
            if path.suffix in (".so", ".pyd"):
                ext = importlib.util.spec_from_file_location("egglog.bindings", path)
                module = importlib.util.module_from_spec(ext)
                ext.loader.exec_module(module)
                sys.modules["egglog.bindings"] = module
                return module
    import egglog.bindings

    return egglog.bindings


def _size(eg: Any, cmd: list) -> int:
    out = eg.run_program(*cmd)[0]
    return sum(n for name, n in out.sizes if name.startswith(("Op_", "Leaf")))


def saturate(nodes: list[Node], rules: list[Rewrite], limits: Limits) -> Saturated:
    """Load ``nodes`` into a fresh e-graph, run ``rules`` within ``limits`` and read the result."""
    EGraph = egglog_bindings().EGraph  # noqa: N806 - the extension's class
    t0 = time.perf_counter()
    keys = AttrKeys()
    head = declarations(used_constructors(nodes, rules)) + rule_program(rules, keys)
    node_keys: dict[int, str] = {}
    rows = node_rows(nodes, keys, node_keys)
    eg = EGraph()
    with tempfile.TemporaryDirectory(prefix="meganeura-egraph-") as tmp:
        inputs = []
        for rel, rs in rows.items():
            path = Path(tmp) / f"{rel}.tsv"
            path.write_text("\n".join(rs) + "\n")
            inputs.append(f'(input {rel} "{path}")')
        eg.run_program(*eg.parse_program(head + "\n".join(inputs) + "\n(run load 1)\n"))
    max_enodes = limits.enodes if limits.enodes is not None else 4 * len(nodes) + 1000
    run_once, size_cmd = eg.parse_program(f"(run {RULESET} 1)"), eg.parse_program("(print-size)")
    matches = {r.name: 0 for r in rules}
    stop, it = f"iteration limit ({limits.iterations})", 0
    while it < limits.iterations:
        report = eg.run_program(*run_once)[0].report
        it += 1
        for name, count in report.num_matches_per_rule.items():
            matches[name] = matches.get(name, 0) + count
        if not report.updated:
            stop = "saturated"
            break
        if time.perf_counter() - t0 > limits.seconds:
            stop = f"time limit ({limits.seconds} s)"
            break
        if _size(eg, size_cmd) > max_enodes:
            stop = f"e-node limit ({max_enodes})"
            break
    enodes, node_class, num_classes = _read_back(eg)
    program = head + ";; the graph's nodes (loaded from tab-separated files with `input`):\n" + facts_text(rows)
    program += f"(run load 1)\n(run-schedule (repeat {limits.iterations} (run {RULESET} 1)))\n"
    return Saturated(enodes, node_class, num_classes, matches, it, stop, time.perf_counter() - t0, program, keys, node_keys)


def _read_back(eg: Any) -> tuple[list[ENode], dict[int, int], int]:
    """E-nodes with dense e-class ids, and the e-class of every graph node."""
    frozen = eg.freeze()
    class_ids: dict[Any, int] = {}
    strings: dict[Any, str] = {}

    def cid(v: Any) -> int:
        return class_ids.setdefault(v, len(class_ids))

    enodes: list[ENode] = []
    node_class: dict[int, int] = {}
    for name, fn in frozen.functions.items():
        if name == "Ref":
            for r in fn.rows:
                node_class[eg.value_to_i64(r.inputs[0])] = cid(r.output)
        elif name == "Leaf":
            for r in fn.rows:
                leaf = eg.value_to_i64(r.inputs[0])
                enodes.append(ENode(cid(r.output), None, (), None, leaf))
        elif name.startswith("Op_"):
            op_name = _op_of(name)
            for r in fn.rows:
                *kids, s = r.inputs
                if s not in strings:
                    strings[s] = eg.value_to_string(s)
                enodes.append(ENode(cid(r.output), op_name, tuple(cid(k) for k in kids), strings[s]))
    return enodes, node_class, len(class_ids)


def _op_of(ctor: str) -> str:
    name = ctor[3:]
    if name in OPS:
        return name
    base, _, _ = name.rpartition("_")  # Op_<op>_<arity>
    return base
