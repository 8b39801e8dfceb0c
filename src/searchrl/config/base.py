"""What every config section shares: strict, frozen pydantic models, and the one error type users see."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict


class ConfigError(ValueError):
    """A user-facing configuration problem; the message names the fix."""


class Section(BaseModel):
    """A config section: unknown keys are errors (never a silent default), values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _device(value: str) -> str:
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", value):
        raise ValueError(f"'{value}' is not a device; use auto, cpu, cuda or cuda:N")
    return value


#: where models run: auto (CUDA when present, else CPU), cpu, cuda or cuda:N
DeviceSpec = Annotated[str, AfterValidator(_device)]


#: what ``fields=`` may map: a QAExample's part -> the field the loader reads it from
FIELD_TARGETS = {"question": "question", "answers": "golden_answers", "id": "id"}


def check_fields(fields: Mapping[str, str] | None) -> dict[str, str]:
    """A ``fields`` mapping ({"question": "query_text", "answers": "gold", "id": "uid"}) checked: known parts, field
    names as strings."""
    fields = dict(fields or {})
    unknown = sorted(set(fields) - set(FIELD_TARGETS))
    if unknown:
        raise ValueError(
            f"fields: unknown part(s) {unknown}; map any of {', '.join(FIELD_TARGETS)} to your field names"
        )
    if bad := next((k for k, v in fields.items() if not isinstance(v, str) or not v), None):
        raise ValueError(f"fields: {bad!r} must name a field (a non-empty string), got {fields[bad]!r}")
    return fields
