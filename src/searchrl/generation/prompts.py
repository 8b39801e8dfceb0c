"""The one prompt renderer: chat messages through the tokenizer's chat template for chat models, plain text for base
models. The rollout engine, the evaluation baselines, the reader reward, the memorization rewriter and the page
summariser all build their prompts here, so "chat or raw" is decided in one place."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def wants_chat(tokenizer: Any, style: str = "auto") -> bool:
    """``style``: "chat", "raw", or "auto" (chat when the tokenizer has a chat template)."""
    if style not in ("auto", "chat", "raw"):
        raise ValueError(f"prompt style '{style}': use auto, chat or raw (model.prompt_style)")
    return style == "chat" or (style == "auto" and bool(getattr(tokenizer, "chat_template", None)))


def render_prompt(
    tokenizer: Any,
    messages: Sequence[dict[str, str]],
    style: str = "auto",
    raw: str | None = None,
    prefill: str = "",
    tools: Sequence[dict[str, Any]] | None = None,
) -> str:
    """``messages`` through the chat template (generation prompt added), or ``raw`` for base models (default: the
    messages' contents joined by blank lines); ``prefill`` opens the model's reply (never sampled); ``tools``: JSON
    function schemas for the template's ``tools=`` (chat only)."""
    if wants_chat(tokenizer, style):
        extra = {"tools": list(tools)} if tools else {}
        text = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False, **extra)
    else:
        text = raw if raw is not None else "\n\n".join(m["content"] for m in messages)
    return text + prefill


def render_user_prompt(
    tokenizer: Any, user_text: str, style: str = "auto", raw_cue: str = "Answer:", prefill: str = ""
) -> str:
    """One user message (chat models), or the text plus a cue line (base models); ``prefill`` opens the reply."""
    raw = f"{user_text}\n{raw_cue}" + (" " if prefill else "")
    return render_prompt(tokenizer, [{"role": "user", "content": user_text}], style, raw, prefill)
