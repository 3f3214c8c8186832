"""The shape of the code: no import cycles anywhere, layers that import downwards only, no core
module over ~600 lines, no core folder over 20 modules, no Qt in core/.

The import graph is read from the source with `ast` (nothing is imported): module-level and
function-level imports alike, and `importlib.import_module("...")` with a literal name, since a
cycle through a lazy import is still a cycle a reader has to untangle. `import a.b.c` also counts
as importing the packages `a` and `a.b` (Python runs their `__init__` first), except the packages
the importing module itself sits in, which are already initialised by then.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "core"
PACKAGES = ("core", "app", "cli", "rewrites")  # everything main.py can import
MAX_LINES = 620  # "no core module over ~600 lines"
MAX_FOLDER_MODULES = 20  # modules directly inside one folder of core/ (its __init__ not counted)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules(roots=("core",)) -> dict[str, Path]:
    return {_module_name(p): p for root in roots for p in sorted((ROOT / root).rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The core modules `name` imports anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    own_packages = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}

    def add(target: str) -> None:
        # the deepest known module the name refers to (`core.model.graph.Graph` -> core.model.graph),
        # and the packages above it whose __init__ runs first (not those `name` itself sits in)
        while target and target not in known:
            target = target.rpartition(".")[0]
        while target:
            if target in known and target != name and target not in own_packages:
                found.add(target)
            target = target.rpartition(".")[0]

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                full = f"{module}.{alias.name}"
                add(full if full in known else module)
        elif isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr == "import_module" and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                add(node.args[0].value)
    return found


def import_graph(roots=("core",)) -> dict[str, set[str]]:
    mods = _modules(roots)
    known = set(mods)
    return {name: _imports(name, path, known) for name, path in mods.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_the_import_graph_reads_lazy_imports():
    graph = import_graph()
    # compile imports tuning inside a function, tvm_import loads the converters by name
    assert "core.compiler.tuning.tune" in graph["core.compiler.compile"]
    assert "core.compiler.frontend.converters" in graph["core.compiler.frontend.onnx_import"]


def test_find_cycles_finds_a_cycle():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_anywhere():
    cycles = find_cycles(import_graph(PACKAGES))
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_no_core_module_is_over_600_lines():
    long = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"core modules over ~600 lines (split them): {long}"


def test_no_core_folder_holds_more_than_20_modules():
    crowded = {}
    for folder in [CORE, *(p for p in CORE.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        n = sum(1 for f in folder.glob("*.py") if f.name != "__init__.py")
        if n > MAX_FOLDER_MODULES:
            crowded[str(folder.relative_to(ROOT))] = n
    assert not crowded, f"folders of core/ with more than {MAX_FOLDER_MODULES} modules (group them by concept): {crowded}"


def test_core_imports_no_qt():
    graph_names = set()
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            mods = []
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                mods = [node.module or ""]
            if any(m.split(".")[0] in ("PySide6", "PyQt5", "PyQt6", "shiboken6", "app") for m in mods):
                graph_names.add(name)
    assert not graph_names, f"core modules importing Qt or app/: {sorted(graph_names)}"


# what each package of core/ may not import: the layers point downwards only
# (model <- views <- rewrite, model/views <- compiler; the compiler never edits or rewrites)
FORBIDDEN = {
    "core.model": ("core.views", "core.rewrite", "core.compiler"),
    "core.views": ("core.rewrite", "core.compiler"),
    "core.rewrite": ("core.compiler",),
    "core.compiler": ("core.rewrite",),
}


def test_core_packages_import_downwards_only():
    wrong = []
    for name, deps in import_graph().items():
        for package, banned in FORBIDDEN.items():
            if name == package or name.startswith(package + "."):
                wrong += [f"{name} -> {d}" for d in sorted(deps) if d.startswith(banned)]
    assert not wrong, "imports against the layers of core/: " + "; ".join(wrong)


# core/compiler's packages in layers, bottom first: a package imports only packages of lower layers
# (docs/compiler.md says what each holds). A new package goes into this list, or the test fails.
COMPILER_LAYERS = [
    {"target", "levels", "tvm_compat"},  # facts about targets and levels; the one adapter of TVM's privates
    {"frontend", "backend"},  # ONNX -> Relax; code generation (LLVM, CUDA, fast math)
    {"schedules", "runtime"},  # schedule rules; what runs compiled code (threads, pool, artifact)
    {"passes"},  # graph passes, layout passes (read the schedules' tile sizes)
    {"pipeline"},  # the pass list and its one runner, lineage, size limit
    {"check"},  # verification against a reference
    {"measure"},  # bench, onnxruntime worker, alternation, kernel timing
    {"tuning"},  # search, database, runners, A/B
    {"compile", "lowering"},  # the entry points
    {"manual"},  # interactive scheduling (on top of compile)
]


def _compiler_part(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["core", "compiler"] else None


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    layer = {name: i for i, names in enumerate(COMPILER_LAYERS) for name in names}
    wrong = []
    for name, deps in graph.items():
        here = _compiler_part(name)
        for dep in sorted(deps):
            there = _compiler_part(dep)
            if here and there and here != there and layer[there] >= layer[here]:
                wrong.append(f"{name} -> {dep}")
    return wrong


def test_compiler_packages_import_lower_layers_only():
    parts = {p for m in _modules() if (p := _compiler_part(m))}
    unknown = sorted(parts - {name for names in COMPILER_LAYERS for name in names})
    assert not unknown, f"core/compiler parts missing from COMPILER_LAYERS: {unknown}"
    wrong = layer_violations(import_graph())
    assert not wrong, "core/compiler imports against its layers: " + "; ".join(wrong)


def test_the_layer_check_refuses_upward_and_sideways_imports():
    graph = {
        "core.compiler.schedules.cpu_conv": {"core.compiler.tuning.db", "core.compiler.target"},  # up; down
        "core.compiler.frontend.converters": {"core.compiler.backend.codegen"},  # same layer
        "core.compiler.tuning.db": {"core.compiler.tuning.files", "core.compiler.schedules"},  # own; down
    }
    assert layer_violations(graph) == ["core.compiler.schedules.cpu_conv -> core.compiler.tuning.db",
                                       "core.compiler.frontend.converters -> core.compiler.backend.codegen"]
