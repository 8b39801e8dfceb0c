"""The one prompt renderer: chat messages through the tokenizer's chat template for chat models, plain text for base
models. The rollout engine, the evaluation baselines, the reader reward, the memorization rewriter and the page
summariser all build their prompts here, so "chat or raw" is decided in one place.

A chat template that takes no system message (Gemma-2 and Mistral / Mixtral v0.1 refuse one, Phi-3-mini drops it
without a word) gets the system text at the head of the first user message, followed by a blank line, as Gemma-3's
and later Mistral templates place it themselves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: stands in for a system prompt while a template is probed; no template alters it.
_SYSTEM_PROBE = "@@searchrl-system-5d2e1b@@"
#: stands in for an assistant message's content while a template is probed.
_REPLY_PROBE = "@@searchrl-reply-end-5d2e1b@@"
_takes_system: dict[str, bool] = {}  # chat template -> whether it renders a system message


def wants_chat(tokenizer: Any, style: str = "auto") -> bool:
    """``style``: "chat", "raw", or "auto" (chat when the tokenizer has a chat template)."""
    if style not in ("auto", "chat", "raw"):
        raise ValueError(f"prompt style '{style}': use auto, chat or raw (model.prompt_style)")
    return style == "chat" or (style == "auto" and bool(getattr(tokenizer, "chat_template", None)))


def takes_system(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders a system message (does not refuse or drop one)."""
    template = str(getattr(tokenizer, "chat_template", None))
    if template not in _takes_system:
        probe = [{"role": "system", "content": _SYSTEM_PROBE}, {"role": "user", "content": "?"}]
        try:
            text = tokenizer.apply_chat_template(probe, add_generation_prompt=True, tokenize=False)
        except Exception:  # noqa: BLE001 (a template refuses a system role by raising; any error means the same)
            text = ""
        _takes_system[template] = _SYSTEM_PROBE in text
    return _takes_system[template]


def fold_system(messages: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """A leading system message moved to the head of the first user message (a new one when none follows)."""
    messages = [dict(m) for m in messages]
    if not messages or messages[0].get("role") != "system":
        return messages
    system, rest = messages[0]["content"], messages[1:]
    if rest and rest[0].get("role") == "user":
        return [{**rest[0], "content": f"{system}\n\n{rest[0]['content']}"}, *rest[1:]]
    return [{"role": "user", "content": system}, *rest]


def template_messages(tokenizer: Any, messages: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """``messages`` as the chat template can take them: folded (:func:`fold_system`) when it takes no system."""
    if messages and messages[0].get("role") == "system" and not takes_system(tokenizer):
        return fold_system(messages)
    return list(messages)


def chat_text(
    tokenizer: Any,
    messages: Sequence[dict[str, str]],
    tools: Sequence[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
) -> str:
    """``messages`` (see :func:`template_messages`) through the chat template; a template that cannot render them is
    a one-line error naming ``model.prompt_style: raw``."""
    from jinja2 import TemplateError

    extra = {"tools": list(tools)} if tools else {}
    messages = template_messages(tokenizer, messages)
    try:
        return tokenizer.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt, tokenize=False, **extra
        )
    except TemplateError as err:
        raise ValueError(
            f"the tokenizer's chat template cannot render this prompt ({err}); give model.prompt_style: raw to send "
            "plain text instead"
        ) from None


def reply_opening(
    tokenizer: Any,
    messages: Sequence[dict[str, str]],
    tags: Sequence[str],
    tools: Sequence[dict[str, Any]] | None = None,
    style: str = "auto",
) -> str:
    """The end of the chat template's generation prompt when it opens one of ``tags`` for the model (DeepSeek-R1-
    Distill's ends ``<think>\\n``): that tag and the whitespace after it. "" when the generation prompt ends otherwise,
    under raw prompts, and when the template cannot render ``messages`` (the prompt then fails with its own error)."""
    if not tags or not wants_chat(tokenizer, style):
        return ""
    try:
        prompt = chat_text(tokenizer, messages, tools)
        head = chat_text(tokenizer, messages, tools, add_generation_prompt=False)
    except Exception:  # noqa: BLE001 (no opening to find; building the prompt reports the template's error)
        return ""
    added = prompt[len(head) :] if prompt.startswith(head) else ""
    body = added.rstrip()
    tag = next((t for t in sorted(tags, key=len, reverse=True) if t and body.endswith(t)), "")
    return added[len(body) - len(tag) :] if tag else ""


def _added_special(tokenizer: Any) -> dict[int, str]:
    """Every added token of ``tokenizer`` marked special, by id."""
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    return {i: tok.content for i, tok in decoder.items() if getattr(tok, "special", False)}


def special_ids(tokenizer: Any) -> set[int]:
    """The ids of ``tokenizer``'s special tokens (the named ones, and every added token marked special)."""
    return set(getattr(tokenizer, "all_special_ids", None) or ()) | set(_added_special(tokenizer))


def special_strings(tokenizer: Any) -> tuple[str, ...]:
    """The text of every special token of ``tokenizer`` (``<|im_end|>``, ``<|endoftext|>``): the strings that a
    tokenizer reads as its control tokens wherever they occur in a text. Longest first, so that replacing them in
    turn never cuts one that holds a shorter one."""
    found = set(getattr(tokenizer, "all_special_tokens", None) or ()) | set(_added_special(tokenizer).values())
    return tuple(sorted((s for s in found if s), key=lambda s: (-len(s), s)))


def reply_end_ids(tokenizer: Any, style: str = "auto") -> list[int]:
    """The token that ends the model's reply, which SFT targets end with: under a chat template, the special token the
    template writes right after an assistant message's content (ChatML's ``<|im_end|>``, Gemma's ``<end_of_turn>``,
    Llama-3's ``<|eot_id|>``, Phi-3's ``<|end|>``; the line break a template may write after it is not the model's);
    the tokenizer's EOS under raw prompts, or when the template writes no special token there (only whitespace
    before it). [] when there is neither."""
    eos = getattr(tokenizer, "eos_token_id", None)
    fallback = [eos] if eos is not None else []
    if not wants_chat(tokenizer, style):
        return fallback
    convo = [{"role": "user", "content": "?"}, {"role": "assistant", "content": _REPLY_PROBE}]
    try:
        text = chat_text(tokenizer, convo, add_generation_prompt=False)
    except Exception:  # noqa: BLE001 (a template that cannot render a reply: building the prompt reports it)
        return fallback
    if text.count(_REPLY_PROBE) != 1:
        return fallback
    after = text.split(_REPLY_PROBE)[1]
    ids, special = tokenizer.encode(after, add_special_tokens=False), special_ids(tokenizer)
    for k, i in enumerate(ids):
        if i in special:
            lead = tokenizer.decode(ids[:k], skip_special_tokens=False) if k else ""
            return [i] if not lead.strip() else fallback
    return fallback


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
        text = chat_text(tokenizer, messages, tools)
    else:
        text = raw if raw is not None else "\n\n".join(m["content"] for m in messages)
    return text + prefill


def render_user_prompt(
    tokenizer: Any, user_text: str, style: str = "auto", raw_cue: str = "Answer:", prefill: str = ""
) -> str:
    """One user message (chat models), or the text plus a cue line (base models); ``prefill`` opens the reply."""
    raw = f"{user_text}\n{raw_cue}" + (" " if prefill else "")
    return render_prompt(tokenizer, [{"role": "user", "content": user_text}], style, raw, prefill)
