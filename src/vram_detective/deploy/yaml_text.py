"""A small YAML writer for the deployment files (dicts, lists, strings, numbers, booleans): block style,
strings quoted (as JSON strings, which YAML reads the same) whenever a plain scalar could be read as something
else. No dependency: the core install has none."""
from __future__ import annotations

import json
import re

_PLAIN = re.compile(r"^[A-Za-z_/][A-Za-z0-9_./-]*$")
_KEYWORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def scalar(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _KEYWORDS:
        return text
    return json.dumps(text)


def dump(value, indent: int = 0) -> str:
    """YAML text for one document."""
    return "\n".join(_lines(value, indent)) + "\n"


def _lines(value, indent: int) -> list[str]:
    pad = " " * indent
    if isinstance(value, dict):
        if not value:
            return [pad + "{}"]
        out = []
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                out.append(f"{pad}{scalar(key)}:")
                out += _lines(item, indent + (0 if isinstance(item, list) else 2))
            else:
                out.append(f"{pad}{scalar(key)}: {_inline(item)}")
        return out
    if isinstance(value, list):
        if not value:
            return [pad + "[]"]
        out = []
        for item in value:
            if isinstance(item, (dict, list)) and item:
                inner = _lines(item, indent + 2)
                out.append(f"{pad}- {inner[0].lstrip()}")
                out += inner[1:]
            else:
                out.append(f"{pad}- {_inline(item)}")
        return out
    return [pad + scalar(value)]


def _inline(value) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return scalar(value)
