"""A kernel's loop nest as data: blocks and loops with the names a person types in a step.

Read from the PrimFunc's IR (not through the schedule, which would record every lookup in its
trace). Loops carry TIR's loop variable name, extent and kind (serial / parallel / vectorized /
unrolled / thread); blocks their iterator kinds (S spatial, R reduction) and the buffers they
read and write.

Names: a loop is named by its variable when no other loop of the kernel has that name;
otherwise by `BLOCK/VAR`, BLOCK being the first block under it (in mm_relu as FuseTIR writes it,
the matmul's loops `matmul/i0`, `matmul/i1`, `k` and the relu's `compute/i0`, `compute/i1`).
`BLOCK/VAR` is accepted for every loop, whatever name it is shown with.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ...errors import WorkbenchError

__all__ = ["NestNode", "LoopNest", "loop_nest", "LOOP_KINDS", "StepRefused"]

logger = logging.getLogger(__name__)

class StepRefused(WorkbenchError):
    """A step that is malformed, names something the kernel lacks, or that TVM refuses."""

    def __init__(self, message: str, step: dict | None = None):
        super().__init__(message)
        self.step = step


LOOP_KINDS = {0: "serial", 1: "parallel", 2: "vectorized", 3: "unrolled", 4: "thread"}


@dataclass
class NestNode:
    """A loop or a block of the nest, with what is inside it."""

    kind: str  # 'loop' | 'block'
    name: str  # a loop's step name (see the module docstring) or the block's name
    var: str = ""  # loop variable
    extent: int | None = None  # loops: None when symbolic
    loop_kind: str = ""  # serial / parallel / vectorized / unrolled / thread
    iters: str = ""  # blocks: 'SSR'
    reads: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    has_init: bool = False
    children: list["NestNode"] = field(default_factory=list)
    loops: list[str] = field(default_factory=list)  # blocks: the loops around them, outermost first
    stmt: Any = field(default=None, repr=False)
    first_block: str = ""  # loops: the first block under them

    def to_json(self) -> dict:
        if self.kind == "loop":
            return {"kind": "loop", "name": self.name, "var": self.var, "extent": self.extent, "loop_kind": self.loop_kind,
                    "children": [c.to_json() for c in self.children]}
        return {"kind": "block", "name": self.name, "iters": self.iters, "reads": self.reads, "writes": self.writes,
                "loops": self.loops, "children": [c.to_json() for c in self.children]}


class LoopNest:
    """The nest of one PrimFunc: `roots` (the tree), `blocks` and `loops` by name."""

    def __init__(self, roots: list[NestNode], blocks: dict[str, NestNode], loops: list[NestNode], buffers: dict[str, Any]):
        self.roots = roots
        self.blocks = blocks
        self.loops = loops
        self.buffers = buffers  # buffer name -> tirx Buffer
        self.by_name = {n.name: n for n in loops}
        self._rvs: dict[str, tuple] = {}  # block -> (block RV, its loop RVs): one lookup per step

    def _lookup(self, sch, block: str) -> tuple:
        if block not in self._rvs:
            rv = sch.get_sblock(block)
            self._rvs[block] = (rv, sch.get_loops(rv))
        return self._rvs[block]

    def to_json(self) -> dict:
        return {"blocks": [{"name": b.name, "iters": b.iters, "reads": b.reads, "writes": b.writes,
                            "loops": [self._loop_json(n) for n in b.loops]} for b in self.blocks.values()],
                "tree": [r.to_json() for r in self.roots]}

    def _loop_json(self, name: str) -> dict:
        n = self.by_name[name]
        return {"name": n.name, "extent": n.extent, "kind": n.loop_kind}

    def describe(self) -> list[str]:
        """The nest as indented text lines (the CLI's --list)."""
        lines: list[str] = []

        def walk(node: NestNode, depth: int) -> None:
            pad = "  " * depth
            if node.kind == "loop":
                kind = "" if node.loop_kind == "serial" else f" {node.loop_kind}"
                lines.append(f"{pad}for {node.name} in {node.extent if node.extent is not None else '?'}{kind}")
            else:
                lines.append(f"{pad}block {node.name} [{node.iters}] reads {', '.join(node.reads) or '-'} writes {', '.join(node.writes) or '-'}")
            for c in node.children:
                walk(c, depth + 1)

        for r in self.roots:
            walk(r, 0)
        return lines

    # -- lookups for steps
    def find_loop(self, ref: str) -> NestNode:
        """The loop a step names: its shown name, `BLOCK/VAR`, or a variable name only one loop has."""
        if ref in self.by_name:
            return self.by_name[ref]
        if "/" in ref:
            block, _, var = ref.partition("/")
            b = self.blocks.get(block)
            if b is None:
                raise WorkbenchError(f"no block '{block}' in loop name '{ref}': the blocks are {', '.join(self.blocks)}.")
            hit = [self.by_name[n] for n in b.loops if self.by_name[n].var == var]
            if hit:
                return hit[-1]
            raise WorkbenchError(f"block '{block}' has no loop '{var}' around it: its loops are {', '.join(b.loops) or 'none'}.")
        same = [n for n in self.loops if n.var == ref]
        if len(same) > 1:
            raise WorkbenchError(f"loop name '{ref}' is ambiguous: say {' or '.join(n.name for n in same)}.")
        if same:
            return same[0]
        raise WorkbenchError(f"no loop '{ref}' in the kernel: its loops are {', '.join(n.name for n in self.loops) or 'none'}.")

    def loop_rv(self, sch, ref: str):
        """The schedule's LoopRV of the loop `ref` names."""
        try:
            node = self.find_loop(ref)
        except WorkbenchError as exc:
            raise StepRefused(str(exc)) from None
        rvs = self._lookup(sch, node.first_block)[1]
        for rv in rvs:
            if sch.get(rv).same_as(node.stmt):
                return rv
        for rv in rvs:
            if sch.get(rv).loop_var.name == node.var:
                return rv
        raise StepRefused(f"loop '{ref}' could not be found in the schedule.")

    def block_rv(self, sch, ref: str):
        if ref not in self.blocks:
            raise StepRefused(f"no block '{ref}' in the kernel: its blocks are {', '.join(self.blocks)}.")
        return self._lookup(sch, ref)[0]

    def check_buffer(self, block: str, buffer: str, mode: str):
        """The Buffer `buffer` of `block` (mode 'read' / 'write' / 'any'), or StepRefused naming what the block has."""
        b = self.blocks.get(block)
        if b is None:
            raise StepRefused(f"no block '{block}' in the kernel: its blocks are {', '.join(self.blocks)}.")
        names = b.reads if mode == "read" else b.writes if mode == "write" else b.reads + b.writes
        if buffer not in names:
            what = {"read": "reads", "write": "writes", "any": "reads or writes"}[mode]
            raise StepRefused(f"block '{block}' {what} {', '.join(names) or 'nothing'}, not '{buffer}'.")
        return self.buffers[buffer]


def loop_nest(func) -> LoopNest:
    """The nest of PrimFunc `func`, named for steps."""
    import tvm
    from tvm import s_tir

    roots: list[NestNode] = []
    blocks: dict[str, NestNode] = {}
    loops: list[NestNode] = []
    buffers: dict[str, Any] = {}

    def walk(stmt, out: list[NestNode], path: list[NestNode]) -> None:
        if stmt is None:
            return
        if isinstance(stmt, tvm.tirx.For):
            extent = getattr(stmt.extent, "value", None)
            node = NestNode("loop", "", var=stmt.loop_var.name, extent=extent if isinstance(extent, int) else None,
                            loop_kind=LOOP_KINDS.get(int(stmt.kind), str(stmt.kind)), stmt=stmt)
            out.append(node)
            loops.append(node)
            walk(stmt.body, node.children, path + [node])
        elif isinstance(stmt, s_tir.SBlockRealize):
            walk(stmt.block, out, path)
        elif isinstance(stmt, s_tir.SBlock):
            for region in list(stmt.reads) + list(stmt.writes):
                buffers.setdefault(region.source.name, region.source)
            for buf in stmt.alloc_buffers:
                buffers.setdefault(buf.name, buf)
            if stmt.name_hint == "root" and not path:
                walk(stmt.body, out, path)
                return
            node = NestNode("block", stmt.name_hint, iters="".join("R" if int(iv.iter_type) == 2 else "S" if int(iv.iter_type) == 0 else "O"
                                                                   for iv in stmt.iter_vars),
                            reads=_unique(r.source.name for r in stmt.reads), writes=_unique(w.source.name for w in stmt.writes),
                            has_init=stmt.init is not None, stmt=stmt)
            node.loops = path  # replaced by names below
            out.append(node)
            blocks[node.name] = node
            for loop in path:
                if not loop.first_block:
                    loop.first_block = node.name
            walk(stmt.body, node.children, path)
        elif isinstance(stmt, tvm.tirx.SeqStmt):
            for s in stmt.seq:
                walk(s, out, path)
        elif isinstance(stmt, tvm.tirx.IfThenElse):
            walk(stmt.then_case, out, path)
            walk(stmt.else_case, out, path)
        else:
            body = getattr(stmt, "body", None)
            if isinstance(body, tvm.tirx.Stmt):
                walk(body, out, path)

    for buf in func.params:  # TVM 0.27: the parameters are the buffers
        if hasattr(buf, "shape"):
            buffers.setdefault(buf.name, buf)
    walk(func.body, roots, [])
    counts: dict[str, int] = {}
    for n in loops:
        counts[n.var] = counts.get(n.var, 0) + 1
    taken: set[str] = set()
    for n in loops:
        name = n.var if counts[n.var] == 1 else f"{n.first_block or '?'}/{n.var}"
        base, k = name, 2
        while name in taken:
            name, k = f"{base}#{k}", k + 1
        n.name = name
        taken.add(name)
    for b in blocks.values():
        b.loops = [loop.name for loop in b.loops]
    return LoopNest(roots, blocks, loops, buffers)


def _unique(names) -> list[str]:
    out: list[str] = []
    for n in names:
        if n not in out:
            out.append(n)
    return out
