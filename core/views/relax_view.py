"""IR -> ViewGraph: what the canvas draws for a lowering stage.

* `module_view(mod, text, lineage)`: the Relax `main` function; one node per binding (an op call,
  a `call_tir` into a kernel, a call into a fused function, a tuple access, an allocation...), one
  edge per variable use, graph inputs/outputs as io nodes. Each node carries `origin` (the ONNX
  node ids it came from), `data["line"]` (its line in the stage's IR text) and, for calls into other
  functions, `data["callee"]`, the function the node expands into (`function_view`).
* `function_view(mod, name, text, lineage)`: one function of the module: a fused Relax function
  (its bindings) or a TIR PrimFunc (one node per compute block, edges through the buffers the
  blocks write and read).
* `kernel_view(base, code, language, lineage)`: the target code: the kernel calls of a Relax view,
  every other binding contracted away, each kernel pointing at its definition in the LLVM IR,
  assembly or CUDA C.

Line numbers come from the printed TVMScript (1-based), found by walking the function's
statements in print order, so clicking a node can show its IR lines.
"""
from __future__ import annotations

import re
from collections import defaultdict

from .viewgraph import ViewEdge, ViewGraph, ViewNode

__all__ = ["Lineage", "module_view", "function_view", "kernel_view", "function_spans", "relax_category", "kernel_definitions"]

_GENERATED_NAME = re.compile(r"^(lv|gv|alloc|storage|_|param_|shape_heap)\d*(_\d+)?$")


class Lineage:
    """Which ONNX node ids each Relax binding and function of one module came from.

    Bindings are keyed by the variable object itself (passes that keep a binding keep its Var),
    with the name as a fallback for names the import chose (ONNX-derived, unique): names passes
    invent (`lv3`, `gv`, `alloc1`) repeat across passes and would mislead.
    """

    def __init__(self, by_var=None, by_name=None, by_function=None):
        self.by_var: dict = dict(by_var or {})
        self.by_name: dict[str, list[int]] = dict(by_name or {})
        self.by_function: dict[str, list[int]] = dict(by_function or {})

    @staticmethod
    def stable_name(name: str) -> bool:
        return not _GENERATED_NAME.match(name)

    def of_var(self, var) -> list[int]:
        hit = self.by_var.get(var)
        if hit is None and self.stable_name(var.name):
            hit = self.by_name.get(var.name)
        return list(hit or [])

    def of_function(self, name: str) -> list[int]:
        return list(self.by_function.get(name, []))

    def as_dict(self) -> dict[str, list[int]]:
        """Name -> ids (names repeated in the module merge), '@function' -> ids."""
        out: dict[str, set[int]] = {}
        for var, ids in self.by_var.items():
            out.setdefault(var.name, set()).update(ids)
        for name, ids in self.by_name.items():
            out.setdefault(name, set()).update(ids)
        merged = {k: sorted(v) for k, v in out.items()}
        merged.update({"@" + k: list(v) for k, v in self.by_function.items()})
        return merged


def _as_lineage(lineage) -> "Lineage":
    if isinstance(lineage, Lineage):
        return lineage
    lineage = lineage or {}
    return Lineage(by_name={k: v for k, v in lineage.items() if not k.startswith("@")},
                   by_function={k[1:]: v for k, v in lineage.items() if k.startswith("@")})


_FUNC_DEF = re.compile(r"^    def ([A-Za-z_]\w*)(?:\[[^\]]*\])?\(")  # `def main[batch](` with symbolic shapes
_DECORATOR = re.compile(r"^    @")


def function_spans(text: str) -> dict[str, tuple[int, int]]:
    """Function name -> (first line, last line), 1-based and inclusive, in TVMScript text."""
    lines = text.splitlines()
    starts: list[tuple[str, int]] = []
    deco_start = None
    for i, line in enumerate(lines):
        if _DECORATOR.match(line):
            if deco_start is None:
                deco_start = i
            continue
        m = _FUNC_DEF.match(line)
        if m:
            starts.append((m.group(1), deco_start if deco_start is not None else i))
        deco_start = None
    spans = {}
    for k, (name, start) in enumerate(starts):
        end = starts[k + 1][1] - 1 if k + 1 < len(starts) else len(lines) - 1
        while end > start and not lines[end].strip():
            end -= 1
        spans[name] = (start + 1, end + 1)
    return spans


_CATEGORY_WORDS = [
    ("convolution", ("conv",)),
    ("matmul", ("matmul", "dense", "linear", "gemm", "einsum", "attention")),
    ("normalization", ("norm", "batch_norm")),
    ("pooling", ("pool", "adaptive")),
    ("activation", ("relu", "sigmoid", "softmax", "gelu", "tanh", "silu", "erf", "clip", "hardswish", "elu")),
    ("shape", ("reshape", "permute", "transpose", "concat", "split", "squeeze", "expand_dims", "flatten", "take",
               "strided_slice", "broadcast_to", "gather", "scatter", "pad", "resize", "tile", "repeat", "mean", "sum",
               "max", "min", "argmax", "cumsum", "layout")),
    ("elementwise", ("add", "subtract", "multiply", "divide", "power", "sqrt", "rsqrt", "exp", "log", "negative",
                     "abs", "astype", "maximum", "minimum", "where", "equal", "less", "greater", "floor", "ceil",
                     "round", "sin", "cos")),
]


def relax_category(name: str) -> str:
    """Canvas colour group for a Relax op / kernel / fused function name ('fused_conv2d_add_relu' -> convolution)."""
    n = name.lower()
    for cat, words in _CATEGORY_WORDS:
        if any(w in n for w in words):
            return cat
    return "other"


def _dim(v) -> str:
    try:
        return str(int(v))
    except (TypeError, ValueError):
        return str(v)


def _dims(ty) -> str:
    shape = getattr(ty, "shape", None)
    if shape is None:
        return ""
    try:
        values = shape.values if hasattr(shape, "values") else shape
        return "×".join(_dim(v) for v in values) or "scalar"
    except Exception:  # noqa: BLE001 - unknown rank
        return ""


def _ty_text(ty) -> str:
    dims = _dims(ty)
    dtype = getattr(ty, "dtype", None)
    return f"{dims} {dtype}".strip() if dims or dtype else ""


def _is_const(e) -> bool:
    return type(e).__name__ in ("GenericConst", "Constant")


def _vars_in(expr) -> list:
    """Variables an expression reads (not descending into nested functions)."""
    from tvm import relax

    out: list = []
    seen: set[str] = set()

    def visit(e):
        if isinstance(e, relax.Var):
            key = f"{e.name}#{id(e)}"
            if key not in seen:
                seen.add(key)
                out.append(e)

    relax.analysis.post_order_visit(expr, visit)
    return out


def _consts_in(expr) -> list:
    from tvm import relax

    out: list = []
    relax.analysis.post_order_visit(expr, lambda e: out.append(e) if _is_const(e) else None)
    return out


def _describe(value) -> tuple[str, str | None]:
    """(label, callee function name or None) for a binding's value."""
    from tvm import relax

    if isinstance(value, relax.Call):
        op = value.op
        if isinstance(op, relax.GlobalVar):
            return op.name_hint, op.name_hint
        opname = getattr(op, "name", None)
        if opname in ("relax.call_tir", "relax.call_tir_inplace", "relax.call_dps_packed") and value.args:
            callee = value.args[0]
            cname = getattr(callee, "name_hint", None) or getattr(callee, "global_symbol", None) or str(callee)
            return cname, cname if isinstance(callee, relax.GlobalVar) else None
        if opname == "relax.call_packed" or (opname is None and isinstance(op, relax.ExternFunc)):
            sym = getattr(op, "global_symbol", None) or "call_packed"
            return str(sym), None
        if opname:
            short = opname.removeprefix("relax.")
            return short, None
        if isinstance(op, relax.Var):
            return f"call {op.name}", None
        return "call", None
    if isinstance(value, relax.TupleGetItem):
        return f"[{value.index}]", None
    if isinstance(value, relax.Tuple):
        return "tuple", None
    if isinstance(value, relax.Var):
        return "=", None
    if _is_const(value):
        return "const", None
    return type(value).__name__, None


_NON_BINDING = re.compile(r"^(R\.func_attr|cls = |with R\.dataflow|R\.output\(|return\b|#|T\.func_attr|\w+ = T\.int(32|64)\(\)$)")


def _statement_lines(text_lines: list[str], span: tuple[int, int]) -> list[int]:
    """1-based line numbers of the binding statements inside a Relax function's printed body."""
    start, end = span
    out = []
    body_indent = None
    for ln in range(start, end + 1):
        line = text_lines[ln - 1]
        stripped = line.strip()
        if not stripped or stripped.startswith("@") or stripped.startswith("def "):
            continue
        indent = len(line) - len(line.lstrip())
        if body_indent is None:
            body_indent = indent
        if _NON_BINDING.match(stripped):
            continue
        if indent < body_indent:
            continue
        out.append(ln)
    return out


def _line_by_name(text_lines: list[str], stmt_lines: list[int], name: str) -> int | None:
    """Fallback when statements and bindings do not pair up: the statement that defines `name`."""
    for ln in stmt_lines:
        stripped = text_lines[ln - 1].lstrip()
        if stripped.startswith(name + ":") or stripped.startswith(name + " ="):
            return ln
    return None


def _bindings(func) -> list:
    from tvm import relax

    body = func.body
    if not isinstance(body, relax.SeqExpr):
        return []
    return [b for blk in body.blocks for b in blk.bindings]


def _relax_function_view(func, fname: str, text_lines: list[str], span, lineage, title: str) -> ViewGraph:
    from tvm import relax

    lineage = _as_lineage(lineage)
    nodes: list[ViewNode] = []
    edges: list[ViewEdge] = []
    producer: dict[str, str] = {}  # var name -> view node id (latest binding wins, as in scoping)
    for p in func.params:
        vid = f"input:{p.name}"
        producer[p.name] = vid
        nodes.append(ViewNode(id=vid, label=p.name, detail=_ty_text(p.ty), category="io",
                              tooltip=f"parameter {p.name}: {_ty_text(p.ty)}",
                              data={"kind": "input", "var": p.name, "line": span[0] if span else None}))
    bindings = _bindings(func)
    stmt_lines = _statement_lines(text_lines, span) if span else []
    aligned = len(stmt_lines) == len(bindings)
    for i, b in enumerate(bindings):
        var = b.var
        value = b.value
        label, callee = _describe(value)
        if isinstance(b, relax.MatchCast):
            label = "match_cast"
        nid = f"b{i}:{var.name}"
        consts = _consts_in(value)
        badges = [f"const {_dims(c.ty)}" for c in consts][:4]
        if len(consts) > 4:
            badges.append(f"+{len(consts) - 4} consts")
        line = stmt_lines[i] if aligned else _line_by_name(text_lines, stmt_lines, var.name)
        origin = lineage.of_var(var)
        if not origin and callee:
            origin = lineage.of_function(callee)
        name_shown = var.name if var.name != "_" else ""
        nodes.append(ViewNode(
            id=nid,
            label=label,
            detail=_dims(var.ty) if hasattr(var.ty, "shape") else "",
            category=relax_category(label) if label not in ("=", "tuple", "const") and not label.startswith("[") else "shape",
            badges=badges,
            tooltip=(f"{name_shown} = " if name_shown else "") + label + (f"\n→ {_ty_text(var.ty)}" if _ty_text(var.ty) else ""),
            origin=origin,
            data={"kind": "binding", "var": var.name, "line": line, "callee": callee, "function": fname},
        ))
        for u in _vars_in(value):
            src = producer.get(u.name)
            if src is not None:
                edges.append(ViewEdge(src=src, dst=nid, label=u.name, detail=_ty_text(u.ty)))
        producer[var.name] = nid
    body = func.body.body if isinstance(func.body, relax.SeqExpr) else func.body
    out_id = "output:" + fname
    nodes.append(ViewNode(id=out_id, label="return", detail=_ty_text(func.ret_ty) if hasattr(func, "ret_ty") else "",
                          category="io", data={"kind": "output", "line": span[1] if span else None}))
    for u in _vars_in(body):
        src = producer.get(u.name)
        if src is not None:
            edges.append(ViewEdge(src=src, dst=out_id, label=u.name, detail=_ty_text(u.ty)))
    return ViewGraph(title=title, nodes=nodes, edges=edges, data={"source": "relax", "function": fname})


_SBLOCK = re.compile(r'^(\s*)with T\.(?:s?block)\("([^"]+)"\)')
_READS = re.compile(r"T\.reads\((.*)\)\s*$")
_WRITES = re.compile(r"T\.writes\((.*)\)\s*$")
_BUF = re.compile(r"([A-Za-z_]\w*)\[")
_PARAM_BUF = re.compile(r"([A-Za-z_]\w*): T\.Buffer\(\((.*?)\),\s*\"")


def _tir_function_view(fname: str, text_lines: list[str], span, lineage, title: str) -> ViewGraph:
    start, end = span
    nodes: list[ViewNode] = []
    edges: list[ViewEdge] = []
    origin = _as_lineage(lineage).of_function(fname)
    header = " ".join(text_lines[start - 1:start + 2])
    params = [(name, re.sub(r"T\.int(?:32|64)\((\w+)\)", r"\1", dims)) for name, dims in _PARAM_BUF.findall(header)]
    blocks: list[list] = []
    current = None
    for ln in range(start, end + 1):
        line = text_lines[ln - 1]
        m = _SBLOCK.match(line)
        if m:
            current = [m.group(2), ln, [], []]
            if m.group(2) != "root":
                blocks.append(current)
            continue
        if current is None:
            continue
        r = _READS.search(line)
        if r:
            current[2] = _BUF.findall(r.group(1))
        w = _WRITES.search(line)
        if w:
            current[3] = _BUF.findall(w.group(1))
    written = {buf for b in blocks for buf in b[3]}
    writer: dict[str, str] = {}
    for pname, dims in params:
        if pname in written:
            continue  # an output of the kernel: drawn at the end
        vid = f"buffer:{pname}"
        writer[pname] = vid
        shape = "×".join(d.strip() for d in dims.split(",") if d.strip())
        nodes.append(ViewNode(id=vid, label=pname, detail=shape, category="io", tooltip=f"input buffer {pname} [{shape}]",
                              data={"kind": "buffer", "line": start}))
    for k, (bname, ln, reads, writes) in enumerate(blocks):
        nid = f"block{k}:{bname}"
        nodes.append(ViewNode(id=nid, label=bname, detail=", ".join(dict.fromkeys(writes)), category=relax_category(bname),
                              tooltip=f"block {bname}\nreads {', '.join(dict.fromkeys(reads)) or '-'}\nwrites {', '.join(dict.fromkeys(writes)) or '-'}",
                              origin=origin, data={"kind": "block", "line": ln, "function": fname}))
        for buf in dict.fromkeys(reads):
            src = writer.get(buf)
            if src is not None and src != nid:
                edges.append(ViewEdge(src=src, dst=nid, label=buf))
        for buf in dict.fromkeys(writes):
            writer[buf] = nid
    for pname, dims in params:
        if pname in written and pname in writer:
            out_id = f"out:{pname}"
            shape = "×".join(d.strip() for d in dims.split(",") if d.strip())
            nodes.append(ViewNode(id=out_id, label=pname, detail=shape, category="io", tooltip=f"output buffer {pname} [{shape}]",
                                  data={"kind": "buffer", "line": start}))
            edges.append(ViewEdge(src=writer[pname], dst=out_id, label=pname))
    return ViewGraph(title=title, nodes=nodes, edges=edges, data={"source": "tir", "function": fname})


def module_view(mod, text: str, lineage, title: str = "main") -> ViewGraph:
    """The Relax `main` of `mod` as a ViewGraph (see the module docstring)."""
    spans = function_spans(text)
    lines = text.splitlines()
    view = _relax_function_view(mod["main"], "main", lines, spans.get("main"), lineage, title)
    view.data["functions"] = {name: span for name, span in spans.items()}
    return view


def function_view(mod, name: str, text: str, lineage) -> ViewGraph:
    """One function of `mod` (fused Relax function or TIR PrimFunc) as a ViewGraph."""
    from tvm import relax

    spans = function_spans(text)
    if name not in spans:
        raise KeyError(name)
    func = mod[name]
    lines = text.splitlines()
    if isinstance(func, relax.Function):
        return _relax_function_view(func, name, lines, spans[name], lineage, name)
    return _tir_function_view(name, lines, spans[name], lineage, name)


def kernel_definitions(code: str, language: str) -> dict[str, int]:
    """Function name -> 1-based line of its definition in LLVM IR ('llvm'), assembly ('asm') or CUDA C ('cuda')."""
    out: dict[str, int] = {}
    if language == "llvm":
        pat = re.compile(r'^define [^@]*@"?([^"(\s]+)"?\(')
    elif language == "cuda":
        pat = re.compile(r'^extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?([A-Za-z_]\w*)\(')
    else:
        pat = re.compile(r"^([A-Za-z_][\w.$]*):\s*(?:#.*)?$")
    for i, line in enumerate(code.splitlines(), 1):
        m = pat.match(line)
        if language == "cuda" and m and line.rstrip().endswith(";"):
            continue  # a forward declaration, not the definition
        if m and m.group(1) not in out:
            out[m.group(1)] = i
    return out


def kernel_view(base: ViewGraph, code: str, language: str, lineage, title: str) -> ViewGraph:
    """The kernels of `base` (a Relax main view) as they appear in target code.

    Nodes that call no kernel (allocations, tuple accesses...) are contracted: their inputs connect
    straight to their consumers, so the view reads as the sequence of kernels the code runs.
    """
    lineage = _as_lineage(lineage)
    defs = kernel_definitions(code, language)
    keep = {n.id for n in base.nodes if n.category == "io" or n.data.get("callee")}
    succ: dict = defaultdict(list)
    for e in base.edges:
        succ[e.src].append(e)
    nodes: list[ViewNode] = []
    for n in base.nodes:
        if n.id not in keep:
            continue
        callee = n.data.get("callee")
        line = None
        if callee:
            # LLVM names the kernel itself (and a `_compute_` body); CUDA appends `_kernel`
            for candidate in (callee, "__tvm_ffi_" + callee, callee + "_kernel", callee + "_kernel0", "_" + callee):
                if candidate in defs:
                    line = defs[candidate]
                    break
            if line is None:
                # '<kernel>_compute_', '<kernel>_prepacked', '__tvm_ffi_<kernel>_...': a suffix after
                # an underscore, never a longer name ('relu1' must not match 'relu11')
                for k, v in defs.items():
                    bare = k.removeprefix("__tvm_ffi_")
                    if bare.startswith(callee + "_"):
                        line = v
                        break
        nodes.append(ViewNode(id=n.id, label=n.label, detail=n.detail, category=n.category, badges=list(n.badges),
                              tooltip=n.tooltip, origin=(lineage.of_function(callee) or list(n.origin)) if callee else list(n.origin),
                              data={**n.data, "line": line if callee else None, "kernel": callee}))
    edges: list[ViewEdge] = []
    seen = set()
    for n in base.nodes:
        if n.id not in keep:
            continue
        stack = list(succ.get(n.id, []))
        visited = set()
        while stack:
            e = stack.pop()
            if e.dst in visited:
                continue
            visited.add(e.dst)
            if e.dst in keep:
                if (n.id, e.dst) not in seen:
                    seen.add((n.id, e.dst))
                    edges.append(ViewEdge(src=n.id, dst=e.dst, label=e.label, detail=e.detail))
            else:
                stack.extend(succ.get(e.dst, []))
    return ViewGraph(title=title, nodes=nodes, edges=edges, data={"source": language})
