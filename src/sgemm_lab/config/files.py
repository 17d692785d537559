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


def read(path: str | Path) -> dict:
    """The mapping in the YAML (or JSON) file ``path``; ConfigError with file, line and column otherwise."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc}") from None
    try:
        data = yaml.load(text, Loader=_loader())  # noqa: S506 - a SafeLoader subclass
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
