"""The SFT trainer's arithmetic: the loss, the validation pass, the logged learning rate and throughput."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from searchrl.config import load_config
from searchrl.sft import trainer as trainer_module
from searchrl.sft.trainer import SFTTrainer, sft_loss
from searchrl.sft.types import SFTExample
from searchrl.testing import letter_sft_examples, tiny_model, tokenizer


def _ragged(n: int = 8) -> list[SFTExample]:
    """Prompts and targets of different lengths (left and right padding in a batch), some targets masked."""
    tok, rnd = tokenizer(), random.Random(0)
    out = []
    for i in range(n):
        p, r = tok.encode("q" * rnd.randint(2, 30) + f"{i}:"), tok.encode(" ans" * rnd.randint(1, 10))
        out.append(SFTExample(p, r, [1] + [rnd.randint(0, 1) for _ in r[1:]]))
    return out


def test_the_loss_is_the_masked_token_mean_of_each_example_alone() -> None:
    """Padding, position ids and the one-token shift at the prompt/response boundary: a padded batch scores each
    target token as the example run alone does, and only loss_mask == 1 tokens count."""
    examples = _ragged()
    trainer = SFTTrainer(load_config(None, ["sft.batch_size=8"]), tiny_model(), tokenizer(), examples, "unused")
    model, nll, n = tiny_model(), torch.zeros(()), 0
    for e in examples:  # each alone: no padding, positions from 0
        with torch.no_grad():
            logits = model(torch.tensor([e.prompt_ids + e.response_ids])).logits[0, len(e.prompt_ids) - 1 : -1]
        per_token = torch.nn.functional.cross_entropy(logits.float(), torch.tensor(e.response_ids), reduction="none")
        nll, n = nll + (per_token * torch.tensor(e.loss_mask)).sum(), n + sum(e.loss_mask)
    with torch.no_grad():
        got = sft_loss(trainer.scorer, examples, trainer.pad)
    assert float(got) == pytest.approx(float(nll / n), rel=1e-5)


def test_validation_runs_in_the_trainings_micro_batches(monkeypatch) -> None:
    """A validation batch of sft.batch_size long rows in one pass would need far more memory than training's
    micro-batches (RAG-R1: 64 rows of up to 10k tokens): it is cut as training cuts it, with the same loss."""
    examples = letter_sft_examples(16)
    cfg = load_config(None, ["sft.val_fraction=0.5", "sft.batch_size=8"])
    whole = SFTTrainer(cfg, tiny_model(), tokenizer(), examples, "unused").validation_loss()
    micro = SFTTrainer(
        cfg.model_copy(update={"sft": cfg.sft.model_copy(update={"micro_batch_size": 2})}),
        tiny_model(),
        tokenizer(),
        examples,
        "unused",
    )
    rows, collate = [], trainer_module.collate
    monkeypatch.setattr(trainer_module, "collate", lambda p, *a, **k: rows.append(len(p)) or collate(p, *a, **k))
    assert micro.validation_loss() == pytest.approx(whole, rel=1e-5)
    assert len(micro.val) == 8 and rows and max(rows) == 2


def test_the_logged_learning_rate_is_the_one_each_step_ran_at(tmp_path: Path) -> None:
    """Warm-up over 4 steps starts at lr/4; a linear decay over 6 steps ends a little above 0, not at it."""
    cfg = load_config(
        None, ["sft.lr=1e-3", "sft.batch_size=2", "sft.warmup_steps=4", "sft.lr_schedule=linear", "sft.epochs=1"]
    )
    hist = SFTTrainer(cfg, tiny_model(), tokenizer(), letter_sft_examples(12), tmp_path).train()
    want = [1e-3 * f for f in (0.25, 0.5, 0.75, 1.0, 2 / 3, 1 / 3)]
    assert [h["lr"] for h in hist] == pytest.approx(want)


def test_tokens_per_second_counts_training_steps_only(tmp_path: Path, monkeypatch) -> None:
    """Validation (and saving) time is not training throughput: a slow validation leaves tokens_per_s as it was."""
    clock = [0.0]
    monkeypatch.setattr(trainer_module, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    cfg = load_config(None, ["sft.val_fraction=0.2", "sft.epochs=2", "sft.batch_size=4"])
    trainer = SFTTrainer(cfg, tiny_model(), tokenizer(), letter_sft_examples(20), tmp_path)
    real_step, real_val = trainer.opt.step, trainer.validation_loss

    def step_in_one_second(*args, **kwargs):
        clock[0] += 1.0
        return real_step(*args, **kwargs)

    def validate_in_100_seconds() -> float:
        clock[0] += 100.0
        return real_val()

    trainer.opt.step, trainer.validation_loss = step_in_one_second, validate_in_100_seconds
    hist = trainer.train()
    per_epoch = sum(len(e.prompt_ids) + len(e.response_ids) for e in trainer.examples)
    assert len(hist) == 8 and hist[-1]["tokens_per_s"] == pytest.approx(2 * per_epoch / 8)


def test_no_finite_validation_loss_is_an_error_naming_the_fix(tmp_path: Path, monkeypatch) -> None:
    """A diverged run has no best epoch: it says so instead of ending without a final model."""
    cfg = load_config(None, ["sft.val_fraction=0.2", "sft.epochs=2", "sft.batch_size=4"])
    trainer = SFTTrainer(cfg, tiny_model(), tokenizer(), letter_sft_examples(10), tmp_path)
    monkeypatch.setattr(trainer, "validation_loss", lambda: float("nan"))
    with pytest.raises(ValueError, match=r"no epoch's validation loss was finite.*lower sft\.lr") as err:
        trainer.train()
    assert "\n" not in str(err.value) and not (tmp_path / "final").exists()


def test_an_example_without_prompt_tokens_is_refused() -> None:
    """Its first target token would be scored from a padding position (or the batch would fail to score)."""
    examples = [*letter_sft_examples(4), SFTExample([], [70, 71], [1, 1], source_uid="row9")]
    with pytest.raises(ValueError, match=r"1 SFT examples have no prompt tokens \(first: row9\).*prompt_ids"):
        SFTTrainer(load_config(None, []), tiny_model(), tokenizer(), examples, "unused")


def test_examples_without_a_target_token_are_counted() -> None:
    examples = [*letter_sft_examples(4), SFTExample([65], [70, 71], [0, 0])]
    trainer = SFTTrainer(load_config(None, []), tiny_model(), tokenizer(), examples, "unused")
    assert trainer.n_no_target == 1 and len(trainer.examples) == 4


def test_a_warmup_longer_than_the_run_is_a_warning(monkeypatch) -> None:
    """sft.warmup_steps=5 over 3 optimizer steps trains at 1/5 .. 3/5 of sft.lr: said, not silent."""
    said: list[str] = []
    monkeypatch.setattr(trainer_module, "console", SimpleNamespace(log=said.append))
    SFTTrainer(load_config(None, ["sft.batch_size=4"]), tiny_model(), tokenizer(), letter_sft_examples(12), "unused")
    assert any("sft.warmup_steps=5 is more than the run's 3 optimizer steps" in line for line in said)
    said.clear()
    cfg = load_config(None, ["sft.batch_size=4", "sft.warmup_steps=3"])
    SFTTrainer(cfg, tiny_model(), tokenizer(), letter_sft_examples(12), "unused")
    assert not any("warmup" in line for line in said)


def _overflowing(trainer: SFTTrainer, steps: set[int] | None) -> None:
    """The logits of the given optimizer steps (1-based; None: every step) turn non-finite, as an overflowing
    forward pass's would."""
    seen: list[int] = []

    def hook(_module, _inputs, out):
        if not torch.is_grad_enabled():
            return None
        seen.append(1)
        return out * float("inf") if steps is None or len(seen) in steps else None

    trainer.model.get_output_embeddings().register_forward_hook(hook)


def test_an_update_whose_gradient_is_not_finite_is_skipped_and_counted(tmp_path: Path) -> None:
    """Taken, the first step would write NaN into every weight, and every later step would train on NaN."""
    cfg = load_config(None, ["sft.batch_size=2", "sft.epochs=1", "sft.lr=1e-3"])
    trainer = SFTTrainer(cfg, tiny_model(), tokenizer(), letter_sft_examples(8), tmp_path)
    _overflowing(trainer, {1})
    hist = trainer.train()
    assert [h["skipped_steps"] for h in hist] == [1.0, 0.0, 0.0, 0.0] and not torch.isfinite(
        torch.tensor(hist[0]["loss"])
    )
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in hist[1:])


def test_updates_skipped_in_a_row_stop_the_run_in_one_line(tmp_path: Path) -> None:
    cfg = load_config(None, ["sft.batch_size=2", "sft.epochs=1", "training.max_skipped_steps=2"])
    model = tiny_model()
    before = [p.detach().clone() for p in model.parameters()]
    trainer = SFTTrainer(cfg, model, tokenizer(), letter_sft_examples(8), tmp_path)
    _overflowing(trainer, None)
    with pytest.raises(ValueError, match=r"diverged: the gradient norm was nan in 2 optimizer steps in a row") as err:
        trainer.train()
    assert "up to SFT step 2" in str(err.value) and "\n" not in str(err.value)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert not (tmp_path / "final").exists()
