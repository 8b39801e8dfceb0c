"""What every config section shares: strict, frozen pydantic models, and the one error type users see."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigError(ValueError):
    """A user-facing configuration problem; the message names the fix."""


class Section(BaseModel):
    """A config section: unknown keys are errors (never a silent default), values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)
