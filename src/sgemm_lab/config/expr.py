"""Integer expressions over tile parameters, as written in the config.

Constraints (``"BM % TM == 0"``) and shared-memory sizes (``"4 * BK * (BM + BN)"``) are data, not
code: they are parsed into a small AST and evaluated over integers only. Names are parameter
macros (plus ``THREADS``); calls allowed: ``min``, ``max``.

Evaluation is bounded, so that no expression can hang a dry run or exhaust memory: every literal,
parameter value, intermediate and final result must lie in signed 64-bit range (no tile parameter or
shared-memory size comes near it), an exponent may be at most :data:`MAX_EXPONENT` and a left shift at most
:data:`MAX_SHIFT` (both refused before anything is computed), and the text is at most
:data:`MAX_LENGTH` characters, nested at most :data:`MAX_DEPTH` deep. Anything else is refused with a
one-line ConfigError naming the config key (``key``) and the part of the expression that broke a bound.
"""

from __future__ import annotations

import ast
import operator
from functools import lru_cache
from typing import Mapping

from ..errors import ConfigError

_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod, ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge}
_CALLS = {"min": min, "max": max}

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_EXPONENT = 62  # 2**62 is the largest power of two in int64: any base beyond +-1 overflows past it
MAX_SHIFT = 63     # the widest shift C defines on a 64-bit operand
MAX_LENGTH = 1000  # characters; the configured expressions are well under 100
MAX_DEPTH = 100    # nesting of the parsed tree (evaluation recurses once a level)


class _Refused(Exception):
    """Why an expression is refused; the public functions add the key and the text."""


def in_int64(value: int) -> bool:
    return INT64_MIN <= value <= INT64_MAX


def describe(value: int) -> str:
    """``value`` for a one-line message: its digits, or its size when they would not fit on a line."""
    return str(value) if abs(value) < 10**30 else f"(an integer of {value.bit_length()} bits)"


def _short(text: str) -> str:
    return text if len(text) <= 120 else text[:100] + "..."


def _show(node: ast.AST) -> str:
    """The part of the expression at ``node``, for a message."""
    return _short(ast.unparse(node))


def _refusal(key: str, text: str, reason: str) -> ConfigError:
    return ConfigError(f"{key} '{_short(text)}': {reason}")


@lru_cache(maxsize=1024)
def _parse(text: str) -> ast.Expression:
    if len(text) > MAX_LENGTH:
        raise _Refused(f"longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise _Refused("not valid syntax") from None
    todo = [(tree, 0)]  # depth-first, without recursion: the tree may be arbitrarily deep
    while todo:
        node, depth = todo.pop()
        if depth > MAX_DEPTH:
            raise _Refused(f"nested more than {MAX_DEPTH} deep")
        ok = isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Name, ast.Load,
                               ast.Constant, ast.Call, ast.USub, ast.Not, ast.And, ast.Or, *_BIN, *_CMP))
        if isinstance(node, ast.Constant) and not isinstance(node.value, int):
            ok = False
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _CALLS and not node.keywords):
            ok = False
        if not ok:
            raise _Refused(f"{type(node).__name__} is not allowed (integers, names, + - * // % ** << >>, comparisons, and/or/not, min/max)")
        if isinstance(node, ast.Constant) and not in_int64(node.value):
            raise _Refused(f"literal {describe(node.value)} is beyond int64")
        if isinstance(node, ast.Call) and len(node.args) < 2:
            raise _Refused(f"{node.func.id}() needs at least two arguments")
        todo += [(child, depth + 1) for child in ast.iter_child_nodes(node)]
    return tree


def parse(text: str, *, key: str = "expression") -> ast.Expression:
    """The checked tree of ``text``; ConfigError (naming ``key``) if it is not a bounded integer expression."""
    try:
        return _parse(text)
    except _Refused as exc:
        raise _refusal(key, text, str(exc)) from None


def names(text: str, *, key: str = "expression") -> set[str]:
    return {n.id for n in ast.walk(parse(text, key=key)) if isinstance(n, ast.Name) and n.id not in _CALLS}


def _binop(node: ast.BinOp, left: int, right: int) -> int:
    op = node.op
    if isinstance(op, (ast.FloorDiv, ast.Mod)) and right == 0:
        raise _Refused("division by zero")
    if isinstance(op, ast.Pow):
        if right < 0:
            raise _Refused(f"{_show(node)} has a negative exponent")
        if right > MAX_EXPONENT and abs(left) > 1:  # 0, 1 and -1 stay small at any power
            raise _Refused(f"{_show(node)} is beyond int64 (exponent at most {MAX_EXPONENT})")
    if isinstance(op, (ast.LShift, ast.RShift)):
        if right < 0:
            raise _Refused(f"{_show(node)} shifts by a negative amount")
        if isinstance(op, ast.LShift) and right > MAX_SHIFT and left != 0:  # a right shift only shrinks
            raise _Refused(f"{_show(node)} is beyond int64 (shift at most {MAX_SHIFT})")
    return _BIN[type(op)](left, right)


def evaluate(text: str, env: Mapping[str, int], *, key: str = "expression") -> int | bool:
    """Evaluate ``text`` with the integer bindings in ``env``.

    ConfigError, one line naming ``key`` and ``text``, on unknown names, x/0, and any value outside int64
    or any exponent or shift beyond its bound (refused before it is computed).
    """

    def checked(node, value):
        if not in_int64(value):
            raise _Refused(f"{_show(node)} is beyond int64")
        return value

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise _Refused(f"unknown parameter {node.id}")
            value = env[node.id]
            if not isinstance(value, int):
                raise _Refused(f"{node.id} = {value!r} is not an integer")
            if not in_int64(value):
                raise _Refused(f"{node.id} = {describe(value)} is beyond int64")
            return value
        if isinstance(node, ast.BinOp):
            left, right = ev(node.left), ev(node.right)
            return checked(node, _binop(node, left, right))
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand)
            return checked(node, -v) if isinstance(node.op, ast.USub) else (not v)
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
        raise _Refused(f"cannot evaluate {type(node).__name__}")  # pragma: no cover

    tree = parse(text, key=key)
    try:
        return ev(tree)
    except _Refused as exc:
        raise _refusal(key, text, str(exc)) from None
