"""The reward section: weighted components, built in (``searchrl.rewards.components.COMPONENTS``) or your own."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import Field, field_validator

from searchrl.config.base import Section
from searchrl.config.extensions import absolute_file

#: the built-in components (searchrl.rewards.components.COMPONENTS).
BuiltinComponent = Literal["answer", "format", "retrieval", "answer_recall", "group", "evidence", "judge", "hops"]


class RewardComponent(Section):
    #: a built-in component, or your own ``fn(inputs, **params) -> (scores, metrics)`` named
    #: ``path/to/file.py:function`` (in the working directory or beside the recipe) or ``module:function``.
    name: str
    weight: float = 1.0
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _builtin_or_yours(cls, v: str) -> str:
        builtin = get_args(BuiltinComponent)
        if v in builtin:
            return v
        if ":" in v:  # a file of yours is kept by its absolute path, so a dumped config loads from anywhere
            return absolute_file(v)
        raise ValueError(
            f"unknown reward component {v!r}: use one of {', '.join(builtin)}, or your own function as "
            "'path/to/file.py:function' or 'module:function'"
        )


class RewardConfig(Section):
    components: list[RewardComponent] = Field(
        default_factory=lambda: [RewardComponent(name="answer", params={"metric": "em"})]
    )
