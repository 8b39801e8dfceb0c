"""Config validation errors as one line a user can act on: the bad key, the closest valid one, and the layer (the
recipe file, a profile, a command-line override) whose value was wrong."""

from __future__ import annotations

import difflib
import re
from typing import Any

from pydantic import BaseModel, ValidationError


def model_fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Valid field names at the location of an error inside ``model``."""
    cls: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = cls.model_fields.get(part)
        if field is None:
            return []
        ann = field.annotation
        args = getattr(ann, "__args__", ()) or ()
        candidates = [ann, *args]
        for a in list(candidates):
            candidates.extend(getattr(a, "__args__", ()) or ())
        nxt = next((a for a in candidates if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if nxt is None:
            return []
        cls = nxt
    return list(cls.model_fields)


def origin_of(loc: tuple[Any, ...], origins: dict[str, str]) -> str | None:
    """The layer (an override, a profile) that set the value at ``loc`` or a section above it."""
    parts = [str(p) for p in loc]
    for n in range(len(parts), 0, -1):
        if (label := origins.get(".".join(parts[:n]))) is not None:
            return label
    return None


def origin_named(msg: str, origins: dict[str, str]) -> str | None:
    """The layer that set a key the message names (a section's own check names the fields it refuses, as in
    "algorithm.kl_target applies with ..."); the longest such key's."""
    named = [k for k in origins if "." in k and re.search(rf"(?<![\w.]){re.escape(k)}(?![\w])", msg)]
    return origins[max(named, key=len)] if named else None


def flat_keys(d: dict[str, Any], prefix: str = "") -> list[str]:
    """Every dotted key of a nested mapping, sections included: ``{"a": {"b": 1}}`` -> ``["a", "a.b"]``."""
    out = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        out.append(key)
        if isinstance(v, dict):
            out += flat_keys(v, key + ".")
    return out


def validation_message(err: ValidationError, model: type[BaseModel], source: str, origins: dict[str, str]) -> str:
    """One line for every error of ``err``; each blamed on its layer from ``origins``, the rest on ``source``."""
    lines, blamed_source = [], False
    for e in err.errors():
        loc = tuple(e["loc"])
        where = ".".join(str(p) for p in loc)
        origin = origin_of(loc, origins)
        if e["type"] == "extra_forbidden":
            valid = model_fields_at(model, loc)
            close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.5)
            parent = ".".join(str(p) for p in loc[:-1])
            hint = f"; did you mean '{'.'.join([parent, close[0]]) if parent else close[0]}'?" if close else ""
            hint = hint or f"; valid keys: {', '.join(valid)}"
            line = f"unknown key '{where}'{hint}"
        else:
            msg = e["msg"].removeprefix("Value error, ")
            line = f"{where}: {msg}" if where else msg
            origin = origin or origin_named(msg, origins)
        lines.append(f"{origin}: {line}" if origin else line)
        blamed_source = blamed_source or origin is None
    return (f"{source}: " if blamed_source else "") + "; ".join(lines)
