"""Reading configuration files strictly, and saying which file a key came from.

Snakemake reads the base config (``configfile:``) and the overlays (``--configfile``) with a YAML
loader that keeps the last of two equal keys, reads ``1e3`` as a string, and reports a syntax error
without its line. The workflow reads the same files here first: a syntax error or a repeated key is
one line with the file, line and column; and when the merged config is refused, ``Origins`` names the
file (or ``--config``) that set the key in question.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..errors import ConfigError

# YAML 1.1 (PyYAML) resolves only numbers with a dot as floats; YAML 1.2 and every user reads 1e3 as one.
_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


def _loader():
    import yaml

    class StrictLoader(yaml.SafeLoader):
        """SafeLoader that refuses a key given twice in one mapping and reads 1e3 as a float."""

    def construct_mapping(loader, node, deep=False):
        seen: dict[Any, Any] = {}
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor`: the keys it brings may be overridden here, as YAML intends
            key = loader.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                continue  # the base constructor reports it
            if key in seen:
                first = seen[key]
                raise yaml.MarkedYAMLError(
                    problem=f"key '{key}' is given twice (first on line {first.line + 1}); the first would be "
                            "silently dropped", problem_mark=key_node.start_mark)
            seen[key] = key_node.start_mark
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789"))
    return StrictLoader


MAX_BYTES = 1 << 20      # a config file (the lab's own is about 40 KB)
MAX_NODES = 200_000      # values once aliases are expanded (a "billion laughs" file expands to 10^9)
MAX_DEPTH = 64           # nesting of lists and mappings
MAX_NUMBER_CHARS = 40    # digits of one number: none the configuration takes is longer


def _bounded(node, path: Path) -> None:
    """ConfigError (file, line, column) for a composed YAML document that would expand past
    ``MAX_NODES`` values (aliases counted as often as they are used), nest past ``MAX_DEPTH`` or hold a
    number longer than ``MAX_NUMBER_CHARS``: checked on the node graph, before anything is built."""
    import yaml

    def where(n) -> str:
        return f"{path}:{n.start_mark.line + 1}:{n.start_mark.column + 1}"

    sizes: dict[int, int] = {}
    stack = [(node, 1, False)]
    while stack:  # (post-order, without recursion: a deep file cannot overflow the interpreter's stack)
        n, depth, done = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(f"{where(n)}: nested more than {MAX_DEPTH} levels deep")
        if isinstance(n, yaml.ScalarNode):
            if n.tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float") and len(n.value) > MAX_NUMBER_CHARS:
                raise ConfigError(f"{where(n)}: a number of {len(n.value)} characters (at most {MAX_NUMBER_CHARS})")
            sizes[id(n)] = 1
            continue
        kids = [k for pair in n.value for k in pair] if isinstance(n, yaml.MappingNode) else list(n.value)
        if not done:
            if id(n) in sizes:
                continue
            stack.append((n, depth, True))
            stack += [(k, depth + 1, False) for k in kids if id(k) not in sizes]
            continue
        sizes[id(n)] = 1 + sum(sizes.get(id(k), 1) for k in kids)
        if sizes[id(n)] > MAX_NODES:
            raise ConfigError(f"{where(n)}: expands to more than {MAX_NODES} values (aliases counted each time "
                              "they are used)")


def read(path: str | Path) -> dict:
    """The mapping in the YAML (or JSON) file ``path``; ConfigError with file, line and column otherwise.
    Bounded before it is built (``MAX_BYTES``, ``_bounded``); a YTE template (``__use_yte__``) is
    refused: Snakemake runs such a file's Python when it reads it, and the lab's config files are data."""
    import yaml

    path = Path(path)
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise ConfigError(f"config file {path} is not a regular file")
        if size > MAX_BYTES:
            raise ConfigError(f"config file {path}: {size} bytes, more than the {MAX_BYTES} a config file may hold")
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc}") from None
    try:
        loader = _loader()(text)
        try:
            node = loader.get_single_node()
            if node is not None:
                _bounded(node, path)
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to read") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        what = " ".join(p for p in (exc.context, exc.problem) if p)
        raise ConfigError(f"{where}: not valid YAML: {what}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys, not a {type(data).__name__}")
    if "__use_yte__" in data:
        raise ConfigError(f"{path}: __use_yte__: a YTE template, whose Python Snakemake runs as it reads the file; "
                          "the lab's config files are data: write the values out")
    return data


def numbers_as_numbers(value: Any) -> Any:
    """``value`` with strings that YAML 1.1 left unresolved (``1e3``, ``-2.5E-3``) read as numbers (an
    integral one as an int): the config Snakemake hands over has them as strings."""
    if isinstance(value, dict):
        return {k: numbers_as_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [numbers_as_numbers(v) for v in value]
    if isinstance(value, str) and _FLOAT.match(value.strip()):
        x = float(value.replace("_", ""))
        return int(x) if x.is_integer() and abs(x) < 2**63 else x
    return value


def _has(data: Any, path: Sequence[Any]) -> bool:
    for part in path:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            data = data[part]
        else:
            return False
    return True


class Origins:
    """Which file set each key of a merged config: the overlays (``--configfile``, later ones win) over
    the base file, and ``--config`` over both, as Snakemake merges them."""

    def __init__(self, files: Iterable[tuple[str, Mapping]], command_line: Mapping | None = None):
        self.files = list(files)  # (name, data), base first
        self.command_line = dict(command_line or {})

    def of(self, path: Sequence[Any]) -> str:
        """The source of the key at ``path`` (e.g. ("check", "alpha")): the most specific place that set
        it, or its parent; the schema's defaults when nothing did."""
        path = list(path)
        while path:
            if _has(self.command_line, path):
                return "--config"
            for name, data in reversed(self.files):
                if _has(data, path):
                    return name
            path = path[:-1]
        return "the schema's defaults"
