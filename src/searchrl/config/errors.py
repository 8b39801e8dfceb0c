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


def origin_of(loc: tuple[Any, ...], origins: dict[str, str], below: bool = False) -> str | None:
    """The layer (an override, a profile) that set the value at ``loc`` or a section above it; with ``below``, also
    one that set a key inside it (``trainin.steps=3`` made the unknown section ``trainin``)."""
    parts = [str(p) for p in loc]
    for n in range(len(parts), 0, -1):
        if (label := origins.get(".".join(parts[:n]))) is not None:
            return label
    inside = ".".join(parts) + "."
    return next((label for key, label in origins.items() if key.startswith(inside)), None) if below else None


def _named(loc: tuple[Any, ...], stage_names: list[Any]) -> tuple[Any, ...]:
    """``loc`` with a pipeline stage's index replaced by its name (``pipeline.1.argz`` -> ``pipeline.rl.argz``), as
    a recipe and a ``pipeline.<stage>.<key>=value`` override name it."""
    if len(loc) > 1 and loc[0] == "pipeline" and isinstance(loc[1], int) and loc[1] < len(stage_names):
        name = stage_names[loc[1]]
        if isinstance(name, str) and name:
            return ("pipeline", name, *loc[2:])
    return loc


def origin_named(msg: str, origins: dict[str, str]) -> str | None:
    """The layer that set a key the message names (a section's own check names the fields it refuses, as in
    "algorithm.kl_target applies with ..."); the longest such key's."""
    named = [k for k in origins if "." in k and re.search(rf"(?<![\w.]){re.escape(k)}(?![\w])", msg)]
    return origins[max(named, key=len)] if named else None


def flat_keys(d: dict[str, Any], prefix: str = "") -> list[str]:
    """The dotted keys of the values a layer sets: ``{"a": {"b": 1}, "c": {}}`` -> ``["a.b", "c"]``. A section that
    holds keys is not one (the layer's dict merges into the recipe's, so the recipe's other keys there stay the
    recipe's); an empty one is (it empties the key)."""
    out = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        out += flat_keys(v, key + ".") if isinstance(v, dict) and v else [key]
    return out


def validation_message(
    err: ValidationError,
    model: type[BaseModel],
    source: str,
    origins: dict[str, str],
    stage_names: list[Any] | None = None,
) -> str:
    """One line for every error of ``err``; each blamed on its layer from ``origins``, the rest on ``source``.
    ``stage_names`` (the raw config's pipeline stages' names) name a stage's keys by its name, not its index."""
    lines, blamed_source = [], False
    for e in err.errors():
        loc = tuple(e["loc"])
        shown = _named(loc, stage_names or [])
        where = ".".join(str(p) for p in shown)
        extra = e["type"] == "extra_forbidden"
        origin = origin_of(shown, origins, below=extra)
        if extra:
            valid = model_fields_at(model, loc)
            close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.5)
            parent = ".".join(str(p) for p in shown[:-1])
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
