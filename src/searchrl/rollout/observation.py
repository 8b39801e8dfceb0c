"""How an observation is cut to ``rollout.max_obs_tokens``: its head and its closing tail survive, and a turn records
the text the policy reads from the inserted tokens."""

from __future__ import annotations

from searchrl.protocols.base import Protocol

_OBS_TAIL = 16  # tokens kept from the end of a truncated observation


def _head_and_tail(ids: list[int], max_tokens: int, tail: int) -> tuple[list[int], list[int]]:
    if len(ids) <= max_tokens:
        return ids, []
    if max_tokens <= tail:  # no room for a head: the cap holds
        return ids[:max_tokens], []
    return ids[: max_tokens - tail], ids[-tail:]


def truncate_observation(ids: list[int], max_tokens: int, tail: int = _OBS_TAIL) -> list[int]:
    """Keep the head and the last ``tail`` tokens of an over-long observation (closing tags survive)."""
    head, end = _head_and_tail(ids, max_tokens, tail)
    return head + end


def cut_observation(
    tokenizer, text: str, max_tokens: int | None, tail: int = _OBS_TAIL, room: int | None = None
) -> tuple[list[int], str]:
    """``text``'s tokens as inserted (:func:`truncate_observation`, then what fits in ``room``) and the text the
    policy reads from them, which a turn records: diagnostics and rewards see no document the policy did not.

    A cut falls between characters: a byte-level tokenizer spreads one character of Chinese, Hindi or an emoji over
    several tokens, and a cut between them would hand the policy bytes that are no text (U+FFFD in the record), so
    the tokens of a character cut in two are left out."""
    full = list(tokenizer.encode(text, add_special_tokens=False))
    head, end = (full, []) if max_tokens is None else _head_and_tail(full, max_tokens, tail)
    if room is not None and len(head) + len(end) > room:
        room = max(room, 0)
        head, end = (head[:room], []) if room <= len(head) else (head, end[: room - len(head)])
    if len(head) + len(end) == len(full):
        return full, text
    if _REPLACEMENT not in text:  # else a U+FFFD of the text itself could not be told from a cut character
        head = _whole_characters(tokenizer, head, False, True)
        end = _whole_characters(tokenizer, end, True, len(end) < tail)
    ids = head + end
    return ids, tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


_REPLACEMENT = "\ufffd"  # what a decode gives for bytes that are not a whole UTF-8 character
_MAX_CHAR_TOKENS = 4  # a UTF-8 character has at most 4 bytes, so a byte-level tokenizer at most 4 tokens


def _whole_characters(tokenizer, ids: list[int], cut_start: bool, cut_end: bool) -> list[int]:
    """``ids`` without the tokens of a character cut in two at its start or its end (where those were cut)."""

    def decoded(part: list[int]) -> str:
        return tokenizer.decode(part, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    for _ in range(_MAX_CHAR_TOKENS - 1):
        if not (cut_end and ids and decoded(ids[-_MAX_CHAR_TOKENS:]).endswith(_REPLACEMENT)):
            break
        ids = ids[:-1]
    for _ in range(_MAX_CHAR_TOKENS - 1):
        if not (cut_start and ids and decoded(ids[:_MAX_CHAR_TOKENS]).startswith(_REPLACEMENT)):
            break
        ids = ids[1:]
    return ids


def observation_tail(protocol: Protocol, tokenizer) -> int:
    """Tokens a truncated observation keeps from its end: ``_OBS_TAIL``, or more when the protocol's closing text
    (``Protocol.observation_suffix``: a chat template's text up to the next turn) needs them, plus one for a token
    the suffix may share with the text before it."""
    suffix = protocol.observation_suffix()
    if not suffix or tokenizer is None:
        return _OBS_TAIL
    return max(_OBS_TAIL, len(tokenizer.encode(suffix, add_special_tokens=False)) + 1)
