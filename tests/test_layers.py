"""The package's imports, read from the source (nothing is imported, so the GPU modules' lazy imports inside
functions are checked too): every import of the package names a module that exists and a name that module
binds; the packages stand in layers, each importing only those below it (no import runs back up, so there
is no circle); and no private name (``_x``) is imported from another module."""

import ast
from pathlib import Path

import pytest
from conftest import ROOT

PKG = ROOT / "src" / "sgemm_lab"

# Bottom to top: a module may import its own package and those on lower layers only. Packages on one
# layer do not import each other.
LAYERS = [
    {"errors"},
    {"config"},
    {"results"},      # result files, logs, step outcomes; verification and timing statistics
    {"gpu"},          # device, compiling, launching (CUDA and host stages), buffers, timing
    {"dispatch"},     # which candidate runs a shape; the concrete spec of a stage
    {"measure"},      # runners, supervised processes, GPU locks, other work on the GPU, ceilings
    {"epilogue", "profiling", "failures"},
    {"sanitizers"},
    {"report"},
    {"pipeline"},     # the steps' entry point and the core steps
    {"library"},      # the lab as a library for the user's own arrays
]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}


def _modules() -> dict[tuple[str, ...], Path]:
    out = {}
    for f in PKG.rglob("*.py"):
        parts = f.relative_to(PKG).with_suffix("").parts
        out[parts[:-1] if parts[-1] == "__init__" else parts] = f
    return out


MODULES = _modules()


def _bound(tree: ast.Module) -> set[str]:
    """Names a module binds at its top level (inside if / try blocks too)."""
    names: set[str] = set()

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for h in node.handlers:
                    visit(h.body)
                visit(node.orelse)
                visit(node.finalbody)
    visit(tree.body)
    return names


def _imports():
    """(importing module, imported module, names or None for a plain import, line) of every import of
    the package, at any depth."""
    for mod, path in MODULES.items():
        package = mod if path.name == "__init__.py" else mod[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
                    target = base + tuple(node.module.split(".") if node.module else ())
                elif node.module and node.module.split(".")[0] == "sgemm_lab":
                    target = tuple(node.module.split(".")[1:])
                else:
                    continue
                yield mod, target, [a.name for a in node.names], node.lineno
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "sgemm_lab":
                        yield mod, tuple(a.name.split(".")[1:]), None, node.lineno


IMPORTS = list(_imports())


def _where(mod, line) -> str:
    return f"{MODULES[mod].relative_to(ROOT)}:{line}"


def test_every_import_of_the_package_names_a_module_and_a_name_it_binds():
    bad = []
    for mod, target, names, line in IMPORTS:
        if target not in MODULES:
            bad.append(f"{_where(mod, line)}: no module sgemm_lab.{'.'.join(target)}")
            continue
        bound = _bound(ast.parse(MODULES[target].read_text()))
        for name in names or ():
            if name != "*" and name not in bound and target + (name,) not in MODULES:
                bad.append(f"{_where(mod, line)}: sgemm_lab.{'.'.join(target)} binds no '{name}'")
    assert not bad, "\n".join(bad)


def test_every_package_is_on_a_layer():
    tops = {m[0] for m in MODULES if m}
    assert tops - {"__init__"} <= set(LAYER), f"packages on no layer: {sorted(tops - set(LAYER))}"


def test_no_import_runs_back_up_a_layer():
    up = []
    for mod, target, _, line in IMPORTS:
        if not mod or not target or mod[0] == target[0]:
            continue
        if LAYER[target[0]] >= LAYER[mod[0]]:
            up.append(f"{_where(mod, line)}: {mod[0]} (layer {LAYER[mod[0]]}) imports {'.'.join(target)} "
                      f"(layer {LAYER[target[0]]})")
    assert not up, f"{len(up)} imports run back up or sideways:\n" + "\n".join(up)


@pytest.mark.parametrize("kind", ["private names"])
def test_no_private_name_is_imported_from_another_module(kind):
    private = [f"{_where(mod, line)}: {name} from sgemm_lab.{'.'.join(target)}"
               for mod, target, names, line in IMPORTS if target != mod
               for name in names or () if name.startswith("_") and not name.startswith("__")]
    assert not private, "\n".join(private)
