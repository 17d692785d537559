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
