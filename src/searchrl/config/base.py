"""What every config section shares: strict, frozen pydantic models, and the one error type users see."""

from __future__ import annotations

import re
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
