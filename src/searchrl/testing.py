"""Test helpers shipped with the package: a tiny random Llama over the byte tokenizer and a one-turn "say letters"
protocol -- a task a small model learns in seconds, used to prove that the RL loop improves reward (and does nothing at
learning rate 0). Useful to users testing their own extensions on CPU."""

from __future__ import annotations

from searchrl.generation.fake import ByteTokenizer
from searchrl.protocols.base import Answer, FormatReport, Invalid, Protocol, Search
from searchrl.retrieval.base import Hit
from searchrl.sft.types import SFTExample


def tiny_model(seed: int = 0):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=259,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(cfg)
    model.generation_config.eos_token_id = 2
    model.generation_config.pad_token_id = 0
    return model


class LettersProtocol(Protocol):
    """Every turn is the answer; no search, no stop strings."""

    name = "letters"
    stop_strings = ()

    def instruction(self, question: str) -> str:
        return f"Q: {question}\nA:"

    def parse(self, turn_text: str):
        return Answer(turn_text)

    def render_observation(self, queries, hits) -> str:
        return ""

    def invalid_feedback(self, action: Invalid) -> str:
        return ""

    def check_format(self, response: str) -> FormatReport:
        return FormatReport(ok=True, has_answer=True, answer=response, n_searches=0)


class LetterStopProtocol(Protocol):
    """A search call ends at any lowercase letter, so the random tiny model makes multi-turn rollouts with inserted
    documents (and a generator reuses cached prefixes between turns); anything else answers."""

    name = "letter_stop"
    stop_strings = tuple("abcdefghijklmnopqrstuvwxyz")

    def instruction(self, question: str) -> str:
        return f"Q: {question}\nA:"

    def parse(self, turn_text: str):
        return Search((turn_text[-1:],)) if turn_text[-1:].islower() else Answer(turn_text)

    def render_observation(self, queries, hits) -> str:
        return " [" + " ".join(h.text for hs in hits for h in hs) + "] "

    def invalid_feedback(self, action: Invalid) -> str:
        return ""

    def check_format(self, response: str) -> FormatReport:
        return FormatReport(ok=True, has_answer=True, answer=response, n_searches=0)


class EchoRetriever:
    """One document per query, about the query itself."""

    def search(self, queries, k):
        return [[Hit(q, q, f"doc about {q}", 1.0)] for q in queries]


def letter_fraction_reward(trajs):
    """Fraction of the policy's tokens that are lowercase ASCII letters (bytes a..z are ids 100..125)."""
    scores = []
    for t in trajs:
        ids = [i for i, m in zip(t.response_ids, t.action_mask, strict=True) if m]
        scores.append(sum(100 <= i <= 125 for i in ids) / max(len(ids), 1))
    return scores, {"reward/total": sum(scores) / len(scores)}


def tokenizer() -> ByteTokenizer:
    return ByteTokenizer()


def letters_trainer(cfg, questions, **kwargs):
    """An RL ``Trainer`` on the letters task: :func:`tiny_model`, :func:`tokenizer`, :class:`LettersProtocol`, no
    retriever and :func:`letter_fraction_reward`; ``kwargs`` go to the Trainer (``micro_batch_size``, ``generator``,
    ``eval_examples``, ...)."""
    from searchrl.rl.trainer import Trainer

    return Trainer(
        cfg, tiny_model(), tokenizer(), LettersProtocol(), None, questions, reward_fn=letter_fraction_reward, **kwargs
    )


def letter_sft_examples(n: int = 10) -> list:
    """``n`` tiny SFT examples ("say i:" -> " letters i abc", every target token trained) over :func:`tokenizer`."""
    tok = tokenizer()
    out = []
    for i in range(n):
        p, r = tok.encode(f"say {i}:"), tok.encode(f" letters {i} abc")
        out.append(SFTExample(p, r, [1] * len(r)))
    return out
