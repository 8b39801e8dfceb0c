"""Where a tool result sits in a chat template: the text between two assistant turns, worked out from the template.

A protocol whose environment replies are chat messages (``tool_call``) inserts, after the model's tool call, exactly
the text the tokenizer's chat template would put between the end of that assistant message and the start of the
next assistant generation, with the reply inside it. For Qwen2.5 / Qwen3 that is::

    <|im_end|>\\n<|im_start|>user\\n<tool_response>\\n{reply}\\n</tool_response><|im_end|>\\n<|im_start|>assistant\\n

:func:`frame_for` finds it for any template by rendering a conversation whose assistant message is a unique marker
and whose reply is another one, and taking the text after the first marker, around the second. Three kinds:

* ``tools``: the template renders ``tools=`` (it references them: the prompt changes when tools are given); the
  reply is a ``tool`` role message, rendered by the template.
* ``hermes``: the template ignores tools (SmolLM2-135M-Instruct): the tool schema goes into the system prompt in
  the Hermes style (``<tools>...</tools>``) and the reply is a ``user`` message ``<tool_response>\\n{reply}\\n
  </tool_response>``, rendered by the template.
* ``raw``: no chat template (``model.prompt_style: raw``): the reply is ``\\n<tool_response>\\n{reply}\\n
  </tool_response>\\n`` in plain text.

A frame also knows the reply's wrapper as a trajectory decodes it (special tokens skipped), so a format check can
find inserted replies in ``Trajectory.response_text``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from searchrl.generation.prompts import chat_text, fold_system, special_strings, wants_chat

#: stand-ins for the assistant's text and the reply while the template renders; no template alters them.
ASSISTANT_MARKER = "@@searchrl-assistant-7f3a9c@@"
REPLY_MARKER = "@@searchrl-reply-7f3a9c@@"
RESPONSE_TAGS = ("<tool_response>", "</tool_response>")


@dataclass(frozen=True)
class ChatFrame:
    """The text around one environment reply, from the end of the assistant's turn to the next generation."""

    kind: Literal["tools", "hermes", "raw"]
    open: str  # after the assistant's text, up to the reply
    close: str  # after the reply, up to where the next assistant generation starts
    #: the template's special-token strings in ``open`` / ``close`` (decoding with skip_special_tokens drops them)
    special: tuple[str, ...] = ()
    open_decoded: str = ""  # ``open`` as ``Trajectory.response_text`` decodes it
    close_decoded: str = ""

    def wrap(self, reply: str) -> str:
        return self.open + reply + self.close

    def visible(self, text: str) -> str:
        """``text`` without the frame's special-token strings (what decoding leaves of them)."""
        for s in self.special:
            text = text.replace(s, "")
        return text


def _plain(kind: Literal["tools", "hermes", "raw"], open_: str, close: str, special: Sequence[str]) -> ChatFrame:
    """A frame whose decoded form is its text without the special-token strings (byte-level BPE tokenizers)."""
    frame = ChatFrame(kind, open_, close, tuple(special))
    return ChatFrame(kind, open_, close, tuple(special), frame.visible(open_), frame.visible(close))


#: no chat template: plain text around the reply.
RAW_FRAME = _plain("raw", "\n<tool_response>\n", "\n</tool_response>\n", ())
#: the Hermes fallback on a ChatML template (SmolLM2, and Qwen's own tool replies render the same text): what a
#: protocol assumes before it is bound to a tokenizer.
CHATML_FRAME = _plain(
    "hermes",
    "<|im_end|>\n<|im_start|>user\n<tool_response>\n",
    "\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
    ("<|im_start|>", "<|im_end|>"),
)


def hermes_reply(reply: str) -> str:
    """A tool reply as the ``user`` message of the Hermes fallback."""
    return f"{RESPONSE_TAGS[0]}\n{reply}\n{RESPONSE_TAGS[1]}"


def _render(tokenizer: Any, messages: list[dict[str, str]], tools: list[dict] | None) -> str:
    """As the engine renders a prompt (a system message folded into the user turn for a template without one)."""
    return chat_text(tokenizer, messages, tools)


def uses_tools(tokenizer: Any, messages: list[dict[str, str]], tools: list[dict]) -> bool:
    """Whether the chat template renders ``tools=`` (the prompt changes when they are given)."""
    try:
        return _render(tokenizer, messages, tools) != _render(tokenizer, messages, None)
    except Exception:  # noqa: BLE001 (a template that cannot take tools= does not use them)
        return False


def _template_frame(
    tokenizer: Any,
    messages: list[dict[str, str]],
    tools: list[dict] | None,
    reply: dict[str, str],
    convo_head: list[dict[str, str]] | None = None,
) -> tuple[str, str] | None:
    """``(open, close)`` around the reply when the template renders the conversation verbatim, else None.

    Verbatim: the marker conversation (``convo_head``, default ``messages``, then the markers) starts with the prompt
    exactly as the engine renders ``messages`` (generation prompt included, less an opening of the reply that
    the template writes only there, which then ends ``close`` too), the assistant's text follows it unchanged,
    and each marker occurs once."""
    convo = [
        *(messages if convo_head is None else convo_head),
        {"role": "assistant", "content": ASSISTANT_MARKER},
        reply,
    ]
    try:
        prompt = _render(tokenizer, messages, tools)
        text = _render(tokenizer, convo, tools)
    except Exception:  # noqa: BLE001 (a template may refuse a reply without a structured tool call)
        return None
    if text.count(ASSISTANT_MARKER) != 1 or text.count(REPLY_MARKER) != 1:
        return None
    head, after = text.split(ASSISTANT_MARKER)
    # a template whose generation prompt opens the reply (DeepSeek-R1's "<think>\n") writes that opening in every
    # generation prompt, the reply's ``close`` included, but not in an assistant message it renders
    opening = prompt[len(head) :] if prompt.startswith(head) else None
    if opening is None or REPLY_MARKER not in after:
        return None
    open_, close = after.split(REPLY_MARKER)
    return (open_, close) if close.endswith(opening) else None


def _decoded(tokenizer: Any, text: str) -> str:
    ids = tokenizer.encode(text, add_special_tokens=False)
    return tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)


def _finish(tokenizer: Any, kind: Literal["tools", "hermes", "raw"], open_: str, close: str) -> ChatFrame:
    special = tuple(s for s in special_strings(tokenizer) if s in open_ + close)
    frame = ChatFrame(kind, open_, close, special, _decoded(tokenizer, open_), _decoded(tokenizer, close))
    if not (frame.open_decoded.strip() and frame.close_decoded.strip()):
        raise ValueError(
            "the chat template's tool reply leaves no visible text around it once special tokens are skipped, so "
            "a format check cannot find it; use model.prompt_style: raw for this tokenizer"
        )
    return frame


def frame_for(
    tokenizer: Any,
    style: str,
    tools: list[dict],
    chat_messages: dict[str, list[dict[str, str]]],
) -> ChatFrame:
    """The frame of ``tokenizer`` under ``style`` (``model.prompt_style``).

    ``chat_messages``: the prompt messages of each chat kind (``tools``: without the schema in them; ``hermes``:
    with it in the system prompt). The ``tools`` kind is taken when the template renders ``tools=`` and renders the
    conversation verbatim, else the ``hermes`` kind; a template that renders neither verbatim is an error."""
    if not wants_chat(tokenizer, style):
        return _finish(tokenizer, "raw", RAW_FRAME.open, RAW_FRAME.close)
    base = chat_messages["tools"]
    if uses_tools(tokenizer, base, tools):
        found = _template_frame(tokenizer, base, tools, {"role": "tool", "content": REPLY_MARKER})
        if found is not None:
            return _finish(tokenizer, "tools", *found)
    hermes, reply = chat_messages["hermes"], {"role": "user", "content": hermes_reply(REPLY_MARKER)}
    # a template that moves the system text to the latest user message (Mistral's) renders the prompt as if it
    # were folded into the first one: the replies are framed as they follow that prompt
    found = _template_frame(tokenizer, hermes, None, reply) or _template_frame(
        tokenizer, hermes, None, reply, convo_head=fold_system(hermes)
    )
    if found is None:
        raise ValueError(
            "this tokenizer's chat template does not render messages verbatim, so the tool_call protocol cannot "
            "place tool replies exactly; use model.prompt_style: raw (or another protocol)"
        )
    return _finish(tokenizer, "hermes", *found)
