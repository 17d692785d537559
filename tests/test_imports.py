"""Every relative import in the package resolves, including those inside functions (which run only on a
GPU path, where a missing module would otherwise first show up)."""

import ast
import importlib
import importlib.util
from pathlib import Path

import sgemm_lab

ROOT = Path(sgemm_lab.__file__).parent


def _package_of(path: Path) -> str:
    """The package a module's relative imports start from (a package's __init__ is in that package)."""
    return ".".join(path.relative_to(ROOT.parent).with_suffix("").parts[:-1])


def test_every_relative_import_resolves():
    missing = []
    for path in sorted(ROOT.rglob("*.py")):
        pkg = _package_of(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level):
                continue
            target = importlib.util.resolve_name("." * node.level + (node.module or ""), pkg)
            if importlib.util.find_spec(target) is None:
                missing.append(f"{path.relative_to(ROOT)}:{node.lineno}: {target}")
                continue
            module = importlib.import_module(target)
            for alias in node.names:
                if not hasattr(module, alias.name) and importlib.util.find_spec(f"{target}.{alias.name}") is None:
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno}: {target}.{alias.name}")
    assert not missing, "unresolved imports:\n" + "\n".join(missing)


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # the parent is a module, not a package
        return False


def _imports(path: Path, pkg: str, *, in_functions: bool) -> set[str]:
    """Modules of the package that ``path`` imports: when it is loaded, and (``in_functions``) also inside
    its functions and methods, which run later but close a circle all the same; never what is imported
    under TYPE_CHECKING (annotations only)."""
    out = set()

    def walk(nodes):
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not in_functions:
                continue
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                walk(node.orelse)
                continue
            if isinstance(node, ast.ImportFrom) and node.level:
                base = importlib.util.resolve_name("." * node.level + (node.module or ""), pkg)
                for alias in node.names:  # "from . import gpu" names a module; "from .config import X" does not
                    full = f"{base}.{alias.name}"
                    out.add(full if _is_module(full) else base)
            walk(ast.iter_child_nodes(node))

    walk(ast.parse(path.read_text()).body)
    return out


def _circles(in_functions: bool) -> list[str]:
    graph = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if path.name == "__init__.py" else parts)
        graph[name] = _imports(path, _package_of(path), in_functions=in_functions)
    state, stack, circles = {}, [], []

    def visit(u):
        state[u] = "open"
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if v not in graph:
                continue
            if state.get(v) == "open":
                circles.append(" -> ".join(stack[stack.index(v):] + [v]))
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name)
    return circles


def test_the_import_graph_has_no_circle():
    circles = _circles(in_functions=False)
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_no_circle_either_through_imports_inside_functions():
    """A function-level import only defers a circle: a -> b -> a through a function is still one feature
    reaching back into another."""
    circles = _circles(in_functions=True)
    assert not circles, "import circles (function-level imports included):\n" + "\n".join(circles)
