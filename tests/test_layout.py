"""The package's layout shows its architecture: few entries at the top (a package per layer or feature),
no module too long to read, and package ``__init__`` files that describe their package without
re-exporting anything (every name is imported from the module that defines it)."""

import ast
from pathlib import Path

import sgemm_lab

ROOT = Path(sgemm_lab.__file__).parent
MAX_TOP_LEVEL = 13   # modules and packages directly in sgemm_lab, __init__.py not counted
MAX_LINES = 400


def _packages() -> list[Path]:
    return sorted(p.parent for p in ROOT.rglob("__init__.py") if "__pycache__" not in p.parts)


def test_few_entries_at_the_top_level():
    entries = sorted(p.name for p in ROOT.iterdir()
                     if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").is_file())
    assert len(entries) <= MAX_TOP_LEVEL, f"{len(entries)} entries in src/sgemm_lab: {', '.join(entries)}"


def test_every_folder_of_modules_is_a_package():
    loose = sorted(str(d.relative_to(ROOT)) for d in {p.parent for p in ROOT.rglob("*.py")} - set(_packages()))
    assert not loose, f"folders of modules without __init__.py: {loose}"


def test_no_module_over_the_line_limit():
    long = sorted(f"{p.relative_to(ROOT)}: {n} lines" for p in ROOT.rglob("*.py")
                  if (n := len(p.read_text().splitlines())) > MAX_LINES)
    assert not long, f"modules over {MAX_LINES} lines:\n" + "\n".join(long)


def _imports_of_the_package(tree: ast.Module) -> list[int]:
    """Lines of imports that reach into sgemm_lab (relative, or absolute by its name)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == "sgemm_lab"):
            out.append(node.lineno)
        elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "sgemm_lab" for a in node.names):
            out.append(node.lineno)
    return out


def test_package_inits_describe_and_re_export_nothing():
    problems = []
    for pkg in _packages():
        path = pkg / "__init__.py"
        tree = ast.parse(path.read_text())
        where = path.relative_to(ROOT)
        if not ast.get_docstring(tree):
            problems.append(f"{where}: no docstring saying what the package holds")
        problems += [f"{where}:{line}: imports from the package (a re-export)" for line in _imports_of_the_package(tree)]
        if any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)
               for n in tree.body):
            problems.append(f"{where}: __all__ (a re-export list)")
    assert not problems, "\n".join(problems)
