"""How an observation is cut to ``rollout.max_obs_tokens``: its head and its closing tail survive, and a turn records
the text the policy reads from the inserted tokens."""

from __future__ import annotations

from searchrl.protocols.base import Protocol

_OBS_TAIL = 16  # tokens kept from the end of a truncated observation


def truncate_observation(ids: list[int], max_tokens: int, tail: int = _OBS_TAIL) -> list[int]:
    """Keep the head and the last ``tail`` tokens of an over-long observation (closing tags survive)."""
    if len(ids) <= max_tokens:
        return ids
    if max_tokens <= tail:  # no room for a head: the cap holds
        return ids[:max_tokens]
    return ids[: max_tokens - tail] + ids[-tail:]


def cut_observation(
    tokenizer, text: str, max_tokens: int | None, tail: int = _OBS_TAIL, room: int | None = None
) -> tuple[list[int], str]:
    """``text``'s tokens as inserted (:func:`truncate_observation`, then what fits in ``room``) and the text the
    policy reads from them, which a turn records: diagnostics and rewards see no document the policy did not."""
    full = list(tokenizer.encode(text, add_special_tokens=False))
    ids = full if max_tokens is None else truncate_observation(full, max_tokens, tail)
    if room is not None:
        ids = ids[: max(room, 0)]
    if len(ids) < len(full):
        text = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    return ids, text


def observation_tail(protocol: Protocol, tokenizer) -> int:
    """Tokens a truncated observation keeps from its end: ``_OBS_TAIL``, or more when the protocol's closing text
    (``Protocol.observation_suffix``: a chat template's text up to the next turn) needs them, plus one for a token
    the suffix may share with the text before it."""
    suffix = protocol.observation_suffix()
    if not suffix or tokenizer is None:
        return _OBS_TAIL
    return max(_OBS_TAIL, len(tokenizer.encode(suffix, add_special_tokens=False)) + 1)
