"""Test doubles: a byte-level tokenizer and a scripted generator that emits given texts as if it had sampled them.

They let the rollout engine, rewards and trainers be tested exactly on CPU without a model (nanochat-style).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from searchrl.generation.base import Completion, ContinuousScheduler, Generator, SamplingParams


class ByteTokenizer:
    """UTF-8 bytes as tokens (ids 3..258); 0 = pad, 1 = bos, 2 = eos. No chat template: prompts are raw text."""

    pad_token_id, bos_token_id, eos_token_id = 0, 1, 2
    all_special_ids = [0, 1, 2]
    pad_token, eos_token = "<pad>", "<eos>"
    chat_template = None
    padding_side = "left"
    vocab_size = 259

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [b + 3 for b in text.encode("utf-8")]

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text)}

    def decode(self, ids: list[int], skip_special_tokens: bool = False, **_: object) -> str:
        data = bytes(i - 3 for i in ids if i >= 3)
        text = data.decode("utf-8", errors="replace")
        if not skip_special_tokens and self.eos_token_id in ids:
            text += self.eos_token
        return text


class ScriptedGenerator(Generator):
    """Replies from ``script(context_text) -> reply_text``; honours stop strings and max_new_tokens like a model.

    Every call is recorded in ``self.calls`` (the decoded contexts) and ``self.params`` (its sampling params), and
    log-probs are deterministic pseudo-random values so tests can check they land on exactly the sampled positions.

    It also decodes continuously (:meth:`decode_continuous`), as a model would step by step: a segment admitted at
    step ``s`` whose reply has ``n`` tokens finishes at step ``s + n``; each admission is recorded in ``calls``.
    """

    supports_continuous = True

    def __init__(self, tokenizer, script: Callable[[str], str], eos: bool = True) -> None:
        self.tokenizer = tokenizer
        self.script = script
        self.eos = eos
        self.calls: list[list[str]] = []
        self.params: list[SamplingParams] = []

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        contexts = [self.tokenizer.decode(p, skip_special_tokens=True) for p in prompts]
        self.calls.append(contexts)
        self.params.append(params)
        return [self._complete(ctx, params.max_new_tokens, params.stop) for ctx in contexts]

    def _complete(self, ctx: str, max_new_tokens: int, stops: tuple[str, ...]) -> Completion:
        reply = self.script(ctx)
        reason, stop_str = "eos", None
        cut = [(reply.find(s) + len(s), s) for s in stops if s in reply]
        if cut:
            end, stop_str = min(cut)
            reply, reason = reply[:end], "stop"
        ids = self.tokenizer.encode(reply)
        if reason == "eos" and self.eos:
            ids = ids + [self.tokenizer.eos_token_id]
        elif reason == "eos":  # no EOS emitted: the turn ran out of tokens
            reason = "length"
        if len(ids) > max_new_tokens:
            ids, reason, stop_str = ids[:max_new_tokens], "length", None
        rng = random.Random(hash(ctx) & 0xFFFF)
        logprobs = [math.log(rng.uniform(0.05, 1.0)) for _ in ids]
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Completion(ids, logprobs, text, reason, stop_str)

    def decode_continuous(self, scheduler: ContinuousScheduler, params: SamplingParams) -> None:
        live: list[tuple[int, int, Completion]] = []  # (finishing step, key, completion)
        step = 0
        while True:
            new = scheduler.ready(wait=not live)
            if new:
                contexts = [self.tokenizer.decode(s.context, skip_special_tokens=True) for s in new]
                self.calls.append(contexts)
                for seg, ctx in zip(new, contexts, strict=True):
                    comp = self._complete(ctx, seg.max_new_tokens, params.stop)
                    live.append((step + max(len(comp.token_ids), 1), seg.key, comp))
            if not live:
                if new is None:
                    return
                continue
            step += 1
            for _, key, comp in [x for x in live if x[0] <= step]:
                scheduler.finished(key, comp)
            live = [x for x in live if x[0] > step]
