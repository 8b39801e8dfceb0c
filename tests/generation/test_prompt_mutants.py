"""The prompt renderer pinned on stand-in tokenizers whose chat templates are written in Python (each test names its
slip): where a system message goes, what the generation prompt opens, which token ends a reply, and the raw
layout for base models."""

from __future__ import annotations

import re

from searchrl.generation.prompts import (
    fold_system,
    render_prompt,
    render_user_prompt,
    reply_end_ids,
    reply_opening,
    special_ids,
    special_strings,
    template_messages,
)

SPECIALS = ("<|eos|>", "<|end|>", "<|user|>", "<|assistant|>")


class Tok:
    """A character-level tokenizer (ids 100 + code point) with ``SPECIALS`` as ids 0-3 and a chat template that is
    a Python function of the messages (``render``); ``chat_template`` names it (the probe cache's key)."""

    eos_token_id = 0

    def __init__(self, name: str, render) -> None:
        self.chat_template, self.render = name, render

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False, **_):
        return self.render(messages, add_generation_prompt)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids = []
        for part in re.split("(" + "|".join(map(re.escape, SPECIALS)) + ")", text):
            ids += [SPECIALS.index(part)] if part in SPECIALS else [100 + ord(c) for c in part]
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(SPECIALS[i] if i < 100 else chr(i - 100) for i in ids)

    all_special_ids = [0, 1, 2, 3]
    all_special_tokens = list(SPECIALS)
    added_tokens_decoder: dict = {}


def turns(end: str = "<|end|>", system: bool = True, opening: str = ""):
    def render(messages, add_generation_prompt):
        out = ""
        for m in messages:
            if m["role"] == "system" and not system:
                continue  # dropped without a word
            out += f"<|{m['role']}|>{m['content']}{end}\n"
        return out + ("<|assistant|>" + opening if add_generation_prompt else "")

    return render


def test_a_folded_system_message_heads_the_first_user_turn_after_a_blank_line() -> None:
    """Slips caught: one line break for the blank line, or the system text lost when no user turn follows."""
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U"},
        {"role": "assistant", "content": "A"},
    ]
    assert fold_system(msgs) == [{"role": "user", "content": "S\n\nU"}, {"role": "assistant", "content": "A"}]
    assert fold_system(msgs[:1]) == [{"role": "user", "content": "S"}]
    assert fold_system([msgs[0], msgs[2]]) == [{"role": "user", "content": "S"}, msgs[2]]
    assert msgs[1]["content"] == "U"  # the caller's messages are left alone


def test_each_template_is_probed_for_a_system_message_on_its_own() -> None:
    """One template renders a system message, the other drops it: only the second gets it folded. Slips caught:
    every system message folded, or one template's probe answer reused for another."""
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    drops, takes = Tok("drops", turns(system=False)), Tok("takes", turns())
    assert template_messages(drops, msgs) == [{"role": "user", "content": "S\n\nU"}]
    assert template_messages(takes, msgs) == msgs
    assert render_prompt(takes, msgs) == "<|system|>S<|end|>\n<|user|>U<|end|>\n<|assistant|>"


def test_the_opening_is_the_longest_tag_the_generation_prompt_ends_with_and_its_whitespace() -> None:
    """Slips caught: a shorter tag that ends the longer one taken for it, or the line break after the tag lost."""
    tok = Tok("think", turns(opening="<think>\n"))
    msgs = [{"role": "user", "content": "?"}]
    assert reply_opening(tok, msgs, ["k>", "<think>"]) == "<think>\n"
    assert reply_opening(tok, msgs, ["<answer>"]) == ""
    assert reply_opening(tok, msgs, ["<think>"], style="raw") == ""


def test_no_opening_when_the_generation_prompt_rewrites_the_history() -> None:
    """A template whose prompt with the generation prompt does not extend the one without (it rewrites a turn):
    no opening can be read off. Slip caught: the tail past the head's length taken anyway."""

    def render(messages, add_generation_prompt):
        text = "".join(m["content"] for m in messages)
        return f"[generation]{text}<think>" if add_generation_prompt else f"[plain]{text}"

    assert reply_opening(Tok("rewrites", render), [{"role": "user", "content": "question"}], ["<think>"]) == ""


def test_the_end_of_a_reply_is_the_special_token_right_after_it_or_else_eos() -> None:
    """Slips caught: a special token taken after text the template writes first, and a template that writes the
    reply twice read as if once."""
    assert reply_end_ids(Tok("end", turns())) == [1]  # <|end|>, right after the reply
    assert reply_end_ids(Tok("end-late", turns(end=" (done)<|end|>"))) == [0]  # text before it: EOS
    assert reply_end_ids(Tok("end-space", turns(end="  <|end|>"))) == [1]  # whitespace before it is fine

    def twice(messages, add_generation_prompt):
        return "".join(f"{m['content']}<|user|>{m['content']}<|end|>" for m in messages)

    assert reply_end_ids(Tok("twice", twice)) == [0]
    assert reply_end_ids(Tok("raw", turns()), style="raw") == [0]


def test_special_strings_are_longest_first_and_special_ids_skip_plain_added_tokens() -> None:
    """Slips caught: shorter strings first (replacing ``<s>`` would cut ``<s>x</s>``), and an added token not marked
    special counted as one."""

    class Added:
        def __init__(self, content: str, special: bool) -> None:
            self.content, self.special = content, special

    tok = Tok("specials", turns())
    tok.all_special_tokens, tok.all_special_ids = ["<s>", "<|eos|>"], [0]
    tok.added_tokens_decoder = {7: Added("<s>x</s>", True), 8: Added("word", False), 9: Added("<b>", True)}
    assert special_strings(tok) == ("<s>x</s>", "<|eos|>", "<b>", "<s>")
    assert special_ids(tok) == {0, 7, 9}


def test_raw_prompts_join_messages_by_blank_lines_and_space_only_before_a_prefill() -> None:
    """Slips caught: messages joined by one line break, a space after the cue with nothing after it, the prefill
    left off."""
    raw = Tok("", turns())
    raw.chat_template = None
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert render_prompt(raw, msgs) == "S\n\nU"
    assert render_prompt(raw, msgs, prefill="<think>") == "S\n\nU<think>"
    assert render_user_prompt(raw, "Q?") == "Q?\nAnswer:"
    assert render_user_prompt(raw, "Q?", prefill="Paris") == "Q?\nAnswer: Paris"
