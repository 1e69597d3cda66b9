"""The package tree keeps its shape: no import circle, dependencies point one way, modules stay small.

Every import counts here, also those inside functions and under ``if TYPE_CHECKING:``: a circle that only
type checking sees is still a circle a reader of the code has to untangle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "multicluster_source"
ROOT_NAME = "multicluster_source"

# Layers, top first: a module may import its own layer's modules and any lower layer's, never a higher one.
LAYERS: list[set[str]] = [
    # the public surface: __init__, source and builder, testing, hybrid; tools; spark (the Spark source)
    {"", "tools", "hybrid", "spark"},
    {"runtime"},
    {"enumerator", "reader"},
    {"replicas"},  # position translation to replica clusters (MirrorMaker 2), used by the enumerator
    {"ops"},
    {"framework"},
    {"metadata"},
    {"exceptions"},
]
# Within a layer, these pairs must not import each other (siblings by role).
SIBLINGS = {("enumerator", "reader"), ("reader", "enumerator")}
MAX_LINES = 410  # STYLE.md: "extract helpers before ~400"


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every module of the package that ``path`` imports (relative imports resolved)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(ROOT_NAME))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if not target.startswith(ROOT_NAME):
                continue
            for alias in node.names:  # "from pkg import module" imports the module
                sub = f"{target}.{alias.name}"
                found.add(sub if (PACKAGE.parent / (sub.replace(".", "/") + ".py")).exists() else target)
    found.discard(name)
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in _imports(path) if m in modules} for name, path in modules.items()}


def _area(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return ""
    if parts[1] in {"exceptions"}:
        return "exceptions"
    if len(parts) == 2 and not (PACKAGE / parts[1]).is_dir():
        return ""  # a root module (the public surface)
    return parts[1]


def _layer(area: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if area in layer)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_walker_sees_relative_type_checking_and_function_level_imports(tmp_path):
    graph = _graph()
    assert "multicluster_source.runtime.push._push" in graph["multicluster_source._source"]  # inside run()
    assert "multicluster_source.framework._split" in graph["multicluster_source.enumerator._state"]
    cyclic = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(cyclic) == [["a", "b", "c"]]


def test_no_import_circle():
    assert _cycles(_graph()) == []


def test_dependencies_point_one_way():
    wrong = []
    for module, targets in sorted(_graph().items()):
        area = _area(module)
        if module.endswith("__init__") or module == ROOT_NAME:
            continue
        for target in sorted(targets):
            target_area = _area(target)
            if target == ROOT_NAME:
                wrong.append(f"{module} -> {target} (the package __init__: import the module itself)")
            elif _layer(target_area) < _layer(area) or (area, target_area) in SIBLINGS:
                wrong.append(f"{module} ({area or 'root'}) -> {target} ({target_area or 'root'})")
    assert wrong == []


def test_runtimes_never_import_the_source_or_builder():
    graph = _graph()
    for module, targets in graph.items():
        if module.startswith(f"{ROOT_NAME}.runtime"):
            assert not {t for t in targets if _area(t) == ""}, module


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_is_over_about_400_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(PACKAGE)} has {lines} lines"


def test_every_subpackage_says_what_lives_there_and_what_it_may_import():
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert doc, init
        if init.parent.name in {"framework", "runtime", "enumerator", "reader", "ops"}:
            assert "May import" in doc, init
