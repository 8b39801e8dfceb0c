"""Randomly initialised policies of the papers' model shapes, for speed and memory checks without weights.

A spec ``random:<shape>:<tokenizer dir>`` (e.g. ``random:qwen2.5-3b:path/to/qwen-tokenizer``) gives a model with
the published configuration of that shape (Qwen2.5 model cards' ``config.json``: hidden size, MLP width, layers,
heads, KV heads, vocabulary, tied embeddings) and the real tokenizer, built on the target device directly. It answers
nothing correctly; it costs what the real model costs per token, in memory and time.
"""

from __future__ import annotations

from pathlib import Path

import torch

#: name -> (hidden, intermediate, layers, heads, kv heads, vocab, tied embeddings)
SHAPES: dict[str, tuple[int, int, int, int, int, int, bool]] = {
    "qwen2.5-tiny": (64, 128, 2, 4, 2, 151936, True),  # CPU tests: the real vocabulary, a toy body
    "qwen2.5-0.5b": (896, 4864, 24, 14, 2, 151936, True),
    "qwen2.5-1.5b": (1536, 8960, 28, 12, 2, 151936, True),
    "qwen2.5-3b": (2048, 11008, 36, 16, 2, 151936, True),
    "qwen2.5-7b": (3584, 18944, 28, 28, 4, 152064, False),
}


def qwen2_config(shape: str):
    """The ``Qwen2Config`` of a named shape."""
    from transformers import Qwen2Config

    if shape not in SHAPES:
        raise ValueError(f"unknown model shape '{shape}'; choose one of {', '.join(SHAPES)}")
    hidden, inter, layers, heads, kv, vocab, tied = SHAPES[shape]
    return Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        tie_word_embeddings=tied,
        max_position_embeddings=32768,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        use_sliding_window=False,
        attn_implementation="sdpa",
    )


def parse_spec(spec: str) -> tuple[str, str]:
    """``random:<shape>:<tokenizer dir>`` -> (shape, tokenizer dir)."""
    parts = spec.split(":", 2)
    if len(parts) != 3 or parts[0] != "random" or not parts[2]:
        raise ValueError(f"model spec '{spec}': write random:<shape>:<tokenizer dir>, e.g. random:qwen2.5-3b:tok/qwen")
    return parts[1], parts[2]


def random_policy(spec: str, dtype: torch.dtype, device: torch.device, seed: int = 0):
    """(model, tokenizer) for a ``random:`` spec, initialised on ``device`` in ``dtype`` with a fixed seed."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    shape, tok_dir = parse_spec(spec)
    if not (Path(tok_dir).expanduser() / "tokenizer_config.json").exists():
        raise FileNotFoundError(
            f"model spec '{spec}': no tokenizer_config.json in {tok_dir}; point it at a "
            "tokenizer directory (e.g. one saved with AutoTokenizer.save_pretrained)"
        )
    cfg = qwen2_config(shape)
    tok = AutoTokenizer.from_pretrained(str(Path(tok_dir).expanduser()))
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    finally:
        torch.random.set_rng_state(state)
    if tok.eos_token_id is not None:
        model.generation_config.eos_token_id = tok.eos_token_id
    return model, tok


def n_params(shape: str) -> int:
    """Parameter count of a shape (embeddings included once when tied)."""
    hidden, inter, layers, heads, kv, vocab, tied = SHAPES[shape]
    head_dim = hidden // heads
    attn = hidden * hidden * 2 + hidden * kv * head_dim * 2 + hidden + 2 * kv * head_dim  # q,o + k,v (+ biases)
    per_layer = attn + 3 * hidden * inter + 2 * hidden
    return layers * per_layer + vocab * hidden * (1 if tied else 2) + hidden
