"""Integer expressions over tile parameters, as written in the config.

Constraints (``"BM % TM == 0"``) and shared-memory sizes (``"4 * BK * (BM + BN)"``) are data, not
code: they are parsed into a small AST and evaluated over integers only. Names are parameter
macros (plus ``THREADS``); calls allowed: ``min``, ``max``.
"""

from __future__ import annotations

import ast
import operator
from functools import lru_cache
from typing import Mapping

from .errors import ConfigError

_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod, ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge}
_CALLS = {"min": min, "max": max}


@lru_cache(maxsize=None)
def parse(text: str) -> ast.Expression:
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ConfigError(f"expression '{text}' is not valid") from None
    for node in ast.walk(tree):
        ok = isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Name, ast.Load,
                               ast.Constant, ast.Call, ast.USub, ast.Not, ast.And, ast.Or, *_BIN, *_CMP))
        if isinstance(node, ast.Constant) and not isinstance(node.value, int):
            ok = False
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _CALLS and not node.keywords):
            ok = False
        if not ok:
            raise ConfigError(f"expression '{text}': {type(node).__name__} is not allowed (integers, names, + - * // % ** << >>, comparisons, and/or/not, min/max)")
    return tree


def names(text: str) -> set[str]:
    return {n.id for n in ast.walk(parse(text)) if isinstance(n, ast.Name) and n.id not in _CALLS}


def evaluate(text: str, env: Mapping[str, int]) -> int | bool:
    """Evaluate ``text`` with the integer bindings in ``env``; ConfigError on unknown names or x/0."""

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise ConfigError(f"expression '{text}': unknown parameter {node.id}")
            return env[node.id]
        if isinstance(node, ast.BinOp):
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
                raise ConfigError(f"expression '{text}': division by zero")
            return _BIN[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else (not v)
        if isinstance(node, ast.BoolOp):
            vals = (ev(v) for v in node.values)
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.Compare):
            left = ev(node.left)
            for op, comp in zip(node.ops, node.comparators):
                right = ev(comp)
                if not _CMP[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.Call):
            return _CALLS[node.func.id](*(ev(a) for a in node.args))
        raise ConfigError(f"expression '{text}': cannot evaluate {type(node).__name__}")  # pragma: no cover

    return ev(parse(text))
