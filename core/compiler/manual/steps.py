"""Schedule steps as data: the primitives a person may apply, checked, described and explained.

A step is a JSON object naming a primitive of `tvm.s_tir.Schedule` and its arguments by name
(core.compiler.manual.nest names loops and blocks). Steps are data, never code: an index map
(`"i, j -> i // 4, j, i % 4"`) is parsed with a whitelist (its indices, integers, + - * // %) and
built into a tvm IndexMap, never evaluated, so loading a steps or trace file executes nothing.
TVM's refusals (a ScheduleError is a page of IR with the reason at its end) become one sentence
naming the step.
"""
from __future__ import annotations

import ast
import json
import re
from typing import Any

from ...errors import WorkbenchError
from .nest import LoopNest, StepRefused

__all__ = ["PRIMITIVES", "parse_step", "describe_step", "load_steps", "index_map", "refusal", "run_step", "plain_json"]

# primitive -> its arguments: (name, kind); kind ends in '?' when optional
PRIMITIVES: dict[str, tuple[tuple[str, str], ...]] = {
    "split": (("loop", "loop"), ("factors", "factors")),
    "fuse": (("loops", "loops"),),
    "reorder": (("loops", "loops"),),
    "parallel": (("loop", "loop"),),
    "vectorize": (("loop", "loop"),),
    "unroll": (("loop", "loop"),),
    "cache_read": (("block", "block"), ("buffer", "buffer"), ("scope", "scope?")),
    "cache_write": (("block", "block"), ("buffer", "buffer"), ("scope", "scope?")),
    "compute_at": (("block", "block"), ("loop", "loop")),
    "reverse_compute_at": (("block", "block"), ("loop", "loop")),
    "compute_inline": (("block", "block"),),
    "reverse_compute_inline": (("block", "block"),),
    "decompose_reduction": (("block", "block"), ("loop", "loop")),
    "transform_layout": (("block", "block"), ("buffer", "buffer"), ("index_map", "index_map")),
    # instructions of a TVM trace no step above expresses (the default schedule's pad_einsum,
    # set_scope, ...), kept as TVM's own trace JSON: replayed by TVM's parser, never evaluated
    "tvm_trace": (("label", "text"), ("trace", "trace"), ("python", "lines?")),
    # what a schedule rule changed outside its trace (an IR edit TVM did not record): the TIR
    # after it, as tvm.ir.save_json data (loaded, never evaluated); no trace can be filed past it
    "replace_tir": (("label", "text"), ("tir", "text")),
}


# ---- steps as data ----------------------------------------------------------------------------------

def parse_step(obj: Any) -> dict:
    """A checked copy of one step (a dict from JSON); StepRefused says what is wrong with it."""
    if not isinstance(obj, dict):
        raise StepRefused(f"a step must be a JSON object like {{\"primitive\": \"split\", ...}}, not {json.dumps(obj)[:60]}.")
    prim = obj.get("primitive")
    if prim not in PRIMITIVES:
        raise StepRefused(f"unknown primitive {json.dumps(prim)}: choose one of {', '.join(PRIMITIVES)}.", obj)
    out: dict = {"primitive": prim}
    for name, kind in PRIMITIVES[prim]:
        optional = kind.endswith("?")
        kind = kind.rstrip("?")
        if name not in obj:
            if optional:
                continue
            raise StepRefused(f"{prim} needs '{name}' ({_KIND_HELP[kind]}).", obj)
        value = obj[name]
        if not _KIND_CHECK[kind](value):
            raise StepRefused(f"{prim}'s '{name}' must be {_KIND_HELP[kind]}, not {json.dumps(value)[:60]}.", obj)
        out[name] = list(value) if isinstance(value, list) else value
    extra = set(obj) - {"primitive"} - {n for n, _ in PRIMITIVES[prim]}
    if extra:
        raise StepRefused(f"{prim} takes no '{sorted(extra)[0]}' (its arguments: {', '.join(n for n, _ in PRIMITIVES[prim])}).", obj)
    if prim == "split" and sum(f is None for f in out["factors"]) > 1:
        raise StepRefused("split's factors may leave one factor open (null), not more.", obj)
    if prim == "transform_layout":
        _parse_index_map(out["index_map"])  # refuses a bad map before anything runs
    return out


_KIND_HELP = {
    "loop": "a loop name",
    "loops": "a list of loop names",
    "block": "a block name",
    "buffer": "a buffer name",
    "scope": "a storage scope such as \"global\"",
    "factors": "a list of two or more positive integers, one of them may be null",
    "index_map": "an index map such as \"i, j -> i // 4, j, i % 4\"",
    "text": "a short text",
    "trace": "TVM's trace JSON: [instructions, decisions]",
    "lines": "a list of lines",
}
_KIND_CHECK = {
    "loop": lambda v: isinstance(v, str) and bool(v),
    "loops": lambda v: isinstance(v, list) and len(v) >= 1 and all(isinstance(x, str) and x for x in v),
    "block": lambda v: isinstance(v, str) and bool(v),
    "buffer": lambda v: isinstance(v, str) and bool(v),
    "scope": lambda v: isinstance(v, str) and bool(v),
    "factors": lambda v: isinstance(v, list) and len(v) >= 2
    and all(f is None or (isinstance(f, int) and not isinstance(f, bool) and f > 0) for f in v),
    "index_map": lambda v: isinstance(v, str) and "->" in v,
    "text": lambda v: isinstance(v, str),
    "trace": lambda v: isinstance(v, list) and len(v) == 2 and all(isinstance(x, list) for x in v)
    and all(isinstance(i, list) and len(i) == 4 and isinstance(i[0], str) for i in v[0]),
    "lines": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
}


def describe_step(step: dict) -> str:
    """One line for the step list: 'split i1 by [None, 4]', 'reverse_compute_at compute at i1_0'."""
    p = step.get("primitive", "?")
    if p == "split":
        return f"split {step['loop']} by {[f for f in step['factors']]}"
    if p in ("fuse", "reorder"):
        return f"{p} {', '.join(step['loops'])}"
    if p in ("parallel", "vectorize", "unroll"):
        return f"{p} {step['loop']}"
    if p in ("compute_at", "reverse_compute_at", "decompose_reduction"):
        return f"{p} {step['block']} at {step['loop']}"
    if p in ("cache_read", "cache_write"):
        return f"{p} {step['buffer']} of {step['block']} ({step.get('scope', 'global')})"
    if p == "transform_layout":
        return f"transform_layout {step['buffer']} of {step['block']}: {step['index_map']}"
    if p == "replace_tir":
        return step["label"]
    if p == "tvm_trace":
        return f"{step['label']} [{sum(1 for i in step['trace'][0] if not i[0].startswith('Get'))} TVM instructions]"
    return f"{p} {step.get('block', '')}".strip()


def load_steps(path) -> list[dict]:
    """Steps from a JSON file: a list of steps, or an object with "steps" (a saved trace)."""
    from pathlib import Path

    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise WorkbenchError(f"cannot read steps file '{p}': {exc.strerror}.") from None
    except ValueError as exc:
        raise WorkbenchError(f"steps file '{p}' is not JSON: {exc}.") from None
    steps = data.get("steps") if isinstance(data, dict) else data
    if not isinstance(steps, list):
        raise WorkbenchError(f"steps file '{p}' must hold a list of steps or an object with \"steps\".")
    out = []
    for i, s in enumerate(steps):
        try:
            out.append(parse_step(s))
        except StepRefused as exc:
            raise StepRefused(f"step {i + 1} of '{p.name}': {exc}", s) from None
    return out


_INDEX_OPS = {ast.Add: "__add__", ast.Sub: "__sub__", ast.Mult: "__mul__"}


def _parse_index_map(text: str) -> tuple[list[str], list[ast.expr]]:
    """'i, j -> i // 4, j, i % 4' as (parameter names, expression trees); only names of the
    parameters, integers and + - * // % are allowed (the text is parsed, never evaluated)."""
    left, _, right = text.partition("->")
    params = [p.strip() for p in left.split(",") if p.strip()]
    if not params or any(not p.isidentifier() for p in params) or len(set(params)) != len(params):
        raise StepRefused(f"index map '{text}': the left of '->' must be distinct index names such as 'i, j'.")
    try:
        tree = ast.parse(right.strip(), mode="eval").body
    except SyntaxError:
        raise StepRefused(f"index map '{text}': the right of '->' is not a list of index expressions.") from None
    exprs = list(tree.elts) if isinstance(tree, ast.Tuple) else [tree]
    for node in (n for e in exprs for n in ast.walk(e)):
        ok = isinstance(node, (ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.Load, ast.Name, ast.Constant))
        if isinstance(node, ast.Name) and node.id not in params:
            raise StepRefused(f"index map '{text}': '{node.id}' is not one of its indices ({', '.join(params)}).")
        if isinstance(node, ast.Constant) and (not isinstance(node.value, int) or isinstance(node.value, bool)):
            ok = False
        if isinstance(node, ast.BinOp) and not isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)):
            ok = False
        if isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.USub):
            ok = False
        if not ok:
            raise StepRefused(f"index map '{text}': only indices, integers and + - * // % are allowed.")
    return params, exprs


def index_map(text: str, dtype: str):
    """The tvm IndexMap of an index-map text (see _parse_index_map)."""
    import tvm

    params, exprs = _parse_index_map(text)
    vars_ = {p: tvm.tirx.Var(p, dtype) for p in params}

    def build(node):
        if isinstance(node, ast.Name):
            return vars_[node.id]
        if isinstance(node, ast.Constant):
            return tvm.tirx.IntImm(dtype, node.value)
        if isinstance(node, ast.UnaryOp):
            return tvm.tirx.IntImm(dtype, 0) - build(node.operand)
        a, b = build(node.left), build(node.right)
        if isinstance(node.op, ast.FloorDiv):
            return tvm.tirx.floordiv(a, b)
        if isinstance(node.op, ast.Mod):
            return tvm.tirx.floormod(a, b)
        return getattr(a, _INDEX_OPS[type(node.op)])(b)

    return tvm.tirx.IndexMap([vars_[p] for p in params], [build(e) for e in exprs], None)


def run_step(sch, nest: LoopNest, step: dict):
    """Apply one parsed step to `sch`, finding loops and blocks by name in `nest`; returns the
    schedule after it (`sch`, or for `replace_tir` a new one on the TIR it holds)."""
    p = step["primitive"]
    if p == "replace_tir":
        import tvm
        from tvm import s_tir

        func = tvm.ir.load_json(step["tir"])
        if not isinstance(func, tvm.tirx.PrimFunc) or len(func.params) != len(sch.mod["main"].params):
            raise StepRefused(f"{step['label']}: its TIR is not a kernel with this kernel's parameters.", step)
        return s_tir.Schedule(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}))
    loop = lambda ref: nest.loop_rv(sch, ref)  # noqa: E731
    block = lambda ref: nest.block_rv(sch, ref)  # noqa: E731
    if p == "split":
        sch.split(loop(step["loop"]), factors=list(step["factors"]))
    elif p in ("fuse", "reorder"):
        if p == "fuse" and len(step["loops"]) < 2:
            raise StepRefused("fuse needs two or more loops.", step)
        getattr(sch, p)(*[loop(ref) for ref in step["loops"]])
    elif p in ("parallel", "vectorize", "unroll"):
        getattr(sch, p)(loop(step["loop"]))
    elif p in ("cache_read", "cache_write"):
        nest.check_buffer(step["block"], step["buffer"], "read" if p == "cache_read" else "write")
        getattr(sch, p)(block(step["block"]), step["buffer"], step.get("scope", "global"))
    elif p in ("compute_at", "reverse_compute_at", "decompose_reduction"):
        getattr(sch, p)(block(step["block"]), loop(step["loop"]))
    elif p in ("compute_inline", "reverse_compute_inline"):
        getattr(sch, p)(block(step["block"]))
    elif p == "transform_layout":
        buf = nest.check_buffer(step["block"], step["buffer"], "any")
        dtype = str(buf.shape[0].ty) if len(buf.shape) else "int64"
        sch.transform_layout(block(step["block"]), step["buffer"], index_map(step["index_map"], dtype))
    elif p == "tvm_trace":
        from tvm.s_tir import Trace

        Trace.apply_json_to_schedule(step["trace"], sch)
    return sch


def plain_json(obj):
    """TVM's JSON-like objects (IntImm, String, Array, Map) as plain Python for json.dumps."""
    import tvm

    if isinstance(obj, (bool, int, float, str)) or obj is None:
        return obj
    if isinstance(obj, (tvm.tirx.IntImm, tvm.tirx.FloatImm)):
        return obj.value
    if hasattr(obj, "items"):
        return {str(k): plain_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) or hasattr(obj, "__len__"):
        return [plain_json(v) for v in obj]
    return str(obj)


# ---- refusals in one sentence ---------------------------------------------------------------------

def refusal(step: dict, exc: BaseException) -> StepRefused:
    """TVM's ScheduleError (a page of IR with the reason at its end) as one sentence."""
    text = str(exc)
    found = re.findall(r"Error message:\s*(.+)", text)
    if found:
        reason = found[-1].strip()
    else:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(("File ", "^", "~"))]
        reason = lines[-1] if lines else type(exc).__name__
        reason = re.sub(r"^(\w+Error|ScheduleError|InternalError):\s*", "", reason)
    loops = step.get("loops") or ([step["loop"]] if "loop" in step else [])
    reason = re.sub(r"tirx\.For#(\d+)", lambda m: f"'{loops[int(m.group(1))]}'" if int(m.group(1)) < len(loops) else "the loop", reason)
    block = f"block '{step['block']}'" if "block" in step else "the block under it"
    reason = re.sub(r"(?:block )?(?:s_tir|tirx)\.S?Block#\d+", block, reason)
    return StepRefused(f"{describe_step(step)} was refused by TVM: {reason.rstrip('.')}.", step)
