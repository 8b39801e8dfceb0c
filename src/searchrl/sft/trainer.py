"""Supervised fine-tuning on multi-turn trajectories with the same record and masks as RL.

The loss is the token-mean NLL over ``loss_mask == 1`` positions only (the policy's own tokens); inserted documents
and feedback are context, never targets, so their gradient is exactly zero. The mean is over the whole optimizer
batch (``sft.batch_size`` examples): each micro-batch's sum is divided by the batch's token count, so the micro-batch
size changes memory, not the gradient; the validation loss is the same token-mean over the whole validation set.
Accepts trajectories (``action_mask`` is the loss mask) or step-level examples with a ``loss_mask``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from searchrl import device as placement
from searchrl.config import RunConfig, record_run
from searchrl.rl.algorithms import aggregate_loss
from searchrl.rl.batch import TokenScorer, collate, plan_micro_batches, score_tokens
from searchrl.rl.checkpoint import load_checkpoint, save_checkpoint
from searchrl.rl.metrics_log import LOG_KEPT, trim_logs
from searchrl.rl.update import SkippedSteps
from searchrl.rollout.agent_file import record_agent
from searchrl.sft.types import SFTExample, as_sft_example
from searchrl.storage import atomic_dir, full_said
from searchrl.tuning import freeze_bottom, save_merged, warmup_schedule, wrap_lora
from searchrl.utils import (
    ResumeRefused,
    StopRequested,
    console,
    make_adamw,
    on_sigterm,
    progress,
    tune_allocator,
)


def _parts(ex: Any) -> tuple[list[int], list[int], list[int]]:
    mask = getattr(ex, "loss_mask", None)
    if mask is None:
        mask = ex.action_mask
    return list(ex.prompt_ids), list(ex.response_ids), list(mask)


def fit_length(ex: Any, max_length: int) -> Any | None:
    """``ex`` itself when prompt + target fit in ``max_length``; else a copy whose target is cut at the end, or None
    when the prompt alone does not leave room for a single target token."""
    p, r, m = _parts(ex)
    uid = getattr(ex, "source_uid", "") or getattr(ex, "uid", "")
    if len(p) + len(r) <= max_length:
        return ex if getattr(ex, "loss_mask", None) is not None else SFTExample(p, r, m, source_uid=uid)
    room = max_length - len(p)
    return SFTExample(p, r[:room], m[:room], source_uid=uid) if room > 0 else None


def sft_loss(
    scorer: TokenScorer,
    examples: Sequence[Any],
    pad_id: int,
    device: torch.device | str = "cpu",
    global_tokens: float | None = None,
):
    """Token-mean NLL over the loss-mask positions of a batch of examples (logits computed only there). With
    ``global_tokens`` (the target-token count of the whole batch) micro-batch losses add up to the batch's loss."""
    prompts, responses, masks = zip(*(_parts(e) for e in examples), strict=True)
    b = collate(prompts, responses, masks, pad_id=pad_id).to(device)
    logp_BT, _ = score_tokens(scorer, b, b.action_mask)  # (B, T)
    return -aggregate_loss(logp_BT, b.action_mask, "token_mean", global_tokens=global_tokens)


class SFTTrainer:
    def __init__(self, cfg: RunConfig, model, tokenizer, examples: Sequence[Any], output_dir: str | Path) -> None:
        """``examples``: SFTExamples, trajectories or JSON rows of either (converted by ``as_sft_example``)."""
        self.cfg, self.scfg = cfg, cfg.sft
        self.tokenizer = tokenizer
        examples = [as_sft_example(e) for e in examples]
        if empty := [e for e in examples if not e.prompt_ids]:
            raise ValueError(
                f"{len(empty)} SFT examples have no prompt tokens (first: {empty[0].source_uid or '?'}): the first "
                "target token is predicted from the token before it; put the context (at least a BOS token) in "
                "prompt_ids"
            )
        fitted = [fit_length(e, self.scfg.max_length) for e in examples]
        kept_len = [len(f.response_ids) if f is not None else 0 for f in fitted]
        self.n_truncated = sum(
            1 for e, f, n in zip(examples, fitted, kept_len, strict=True) if f is not None and n < len(_parts(e)[1])
        )
        self.n_dropped = sum(1 for f in fitted if f is None)
        if self.n_truncated or self.n_dropped:
            console.log(
                f"[yellow]warning:[/yellow] sft.max_length={self.scfg.max_length}: {self.n_truncated} examples cut "
                f"at the end (what follows the cut, their answer included, is not trained on), {self.n_dropped} "
                "dropped (the prompt alone too long); raise sft.max_length to keep them whole"
            )
        kept = [e for e in fitted if e is not None and sum(e.loss_mask) > 0]
        self.n_no_target = sum(1 for e in fitted if e is not None) - len(kept)
        if self.n_no_target:
            console.log(f"[yellow]warning:[/yellow] {self.n_no_target} SFT examples dropped: no loss_mask == 1 token")
        if not kept:
            raise ValueError("no SFT examples with policy tokens: check the SFT data source (and sft.max_length)")
        self.val: list[Any] = []
        if self.scfg.val_fraction > 0:
            if not 0 < self.scfg.val_fraction < 1:
                raise ValueError(f"sft.val_fraction must be in (0, 1), got {self.scfg.val_fraction}")
            # whole trajectories to one side: the step-level samples of one trajectory share their context, so
            # split apart they would make the validation loss an optimistic one
            groups: dict[str, list[int]] = {}
            for i, e in enumerate(kept):
                groups.setdefault(getattr(e, "source_uid", "") or f"#{i}", []).append(i)
            order = list(groups)
            random.Random(cfg.training.seed + 1).shuffle(order)
            n_val, val = max(1, round(len(kept) * self.scfg.val_fraction)), set()
            for key in order:
                if len(val) >= n_val:
                    break
                val.update(groups[key])
            if len(val) >= len(kept):
                raise ValueError(f"sft.val_fraction={self.scfg.val_fraction} leaves no training example")
            self.val = [kept[i] for i in sorted(val)]
            kept = [e for i, e in enumerate(kept) if i not in val]
        self.examples = kept
        self.best_val, self.best_epoch = float("inf"), -1  # the validation set's best epoch so far
        if self.scfg.freeze_layers and cfg.model.lora is not None:
            raise ValueError("sft.freeze_layers and model.lora both restrict what trains: set one of them")
        model = wrap_lora(freeze_bottom(model, self.scfg.freeze_layers), cfg.model.lora)
        if cfg.training.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.model = model
        self.scorer = TokenScorer(model)
        self.device = next(model.parameters()).device
        self.place = placement.current()
        self.out_dir = Path(output_dir)
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        params = [p for p in model.parameters() if p.requires_grad]
        self.opt = make_adamw(params, lr=self.scfg.lr, weight_decay=0.0, betas=self.scfg.adam_betas)
        self.skipped = SkippedSteps(cfg.training.max_skipped_steps)  # updates with a gradient norm that is not finite
        tune_allocator()
        total = self.scfg.epochs * ((len(self.examples) + self.scfg.batch_size - 1) // self.scfg.batch_size)
        self.sched = warmup_schedule(
            self.opt, self.scfg.warmup_steps, total, self.scfg.lr_schedule, self.scfg.min_lr_ratio
        )
        if self.scfg.warmup_steps > total:
            console.log(
                f"[yellow]warning:[/yellow] sft.warmup_steps={self.scfg.warmup_steps} is more than the run's {total} "
                f"optimizer steps: the learning rate never reaches sft.lr; set sft.warmup_steps below {total}"
            )

    def train(self, resume: bool = False) -> list[dict[str, float]]:
        """Every epoch's batches; with ``resume``, on from ``<out>/checkpoint`` (its weights, optimizer, and the
        data order's place). Checkpoints every ``sft.save_every`` steps, and at a SIGTERM, which then stops the run
        (exit 143) saying how to go on."""
        rng = random.Random(self.cfg.training.seed)
        bs = self.scfg.batch_size
        n_batches = (len(self.examples) + bs - 1) // bs
        step, first_epoch, done_in_epoch = 0, 0, 0
        if resume:
            step, first_epoch, done_in_epoch = self._load_checkpoint(rng)
        else:  # an earlier run's checkpoint (or the one a save cut between its renames left at checkpoint.old, which
            # a resume puts back): a later --resume must not take it for this run's
            for stale in (self.checkpoint, self.checkpoint.with_name("checkpoint.old")):
                shutil.rmtree(stale, ignore_errors=True)
        record_run(self.cfg, self.out_dir)
        history: list[dict[str, float]] = []
        self.model.train()
        t0 = time.perf_counter()
        tokens, train_s = 0, 0.0  # tokens per second of training steps (validations and saves left out)
        with (
            progress() as bar,
            on_sigterm(defer=True) as stop_requested,
            (self.out_dir / "metrics.jsonl").open("a" if resume else "w", encoding="utf-8") as log,
        ):
            task = bar.add_task("sft", total=self.scfg.epochs * n_batches, completed=step)
            for epoch in range(first_epoch, self.scfg.epochs):
                epoch_rng = rng.getstate()  # what re-creates this epoch's batches on resume
                for b, idx in enumerate(self._batches(rng, bs)):
                    if epoch == first_epoch and b < done_in_epoch:
                        continue
                    t_step = time.perf_counter()
                    batch = [self.examples[i] for i in idx]
                    n_tok = float(sum(sum(_parts(e)[2]) for e in batch))
                    self.opt.zero_grad(set_to_none=True)
                    loss = torch.zeros((), device=self.device)
                    placement.reset_peak_memory()
                    for part_idx in self._micro(batch):
                        with placement.autocast(self.device):
                            part = sft_loss(self.scorer, [batch[i] for i in part_idx], self.pad, self.device, n_tok)
                        part.backward()
                        loss = loss + part.detach()
                    gnorm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.training.max_grad_norm)
                    lr = self.sched.get_last_lr()[0]  # the rate this step ran at (the scheduler then moves on)
                    taken = self.skipped.finite(gnorm)  # NaN / inf: taken, it would write it into the weights
                    if taken:
                        self.opt.step()
                    self.sched.step()
                    step += 1
                    tokens += sum(len(_parts(e)[0]) + len(_parts(e)[1]) for e in batch)
                    train_s += time.perf_counter() - t_step
                    m = {
                        "step": step,
                        "epoch": epoch,
                        "loss": float(loss.detach()),
                        "grad_norm": float(gnorm),
                        "skipped_steps": float(not taken),
                        "lr": lr,
                        "tokens_per_s": tokens / max(train_s, 1e-9),
                        **placement.peak_memory_metrics(),
                    }
                    history.append(m)
                    self._write(log, m)
                    self.skipped.check(f"SFT step {step}")  # too many non-finite updates in a row: stop
                    bar.update(task, advance=1, description=f"sft loss={m['loss']:.3f}")
                    stop = stop_requested()
                    if stop or (self.scfg.save_every and step % self.scfg.save_every == 0):
                        self._save_checkpoint(step, epoch, b + 1, epoch_rng)
                    if stop:
                        total = self.scfg.epochs * n_batches
                        raise StopRequested(
                            f"stopped by SIGTERM at SFT step {step} of {total}, checkpoint in {self.checkpoint}; "
                            "to go on: searchrl sft --resume, or the same searchrl run"
                        )
                if self.val:
                    val_loss = self.validation_loss()
                    if history:  # none when a resumed run had only this epoch's validation left
                        history[-1]["val_loss"] = val_loss
                    self._write(log, {"step": step, "epoch": epoch, "val_loss": val_loss})
                    if val_loss < self.best_val:  # kept aside: a run stopped mid-way leaves no final model
                        self.best_val, self.best_epoch = val_loss, epoch
                        self.save(self.out_dir / "best")
                    self.model.train()
                if stop_requested() and epoch + 1 < self.scfg.epochs:  # arrived during the validation
                    self._save_checkpoint(step, epoch + 1, 0, rng.getstate())
                    raise StopRequested(
                        f"stopped by SIGTERM after SFT epoch {epoch}, checkpoint in {self.checkpoint}; "
                        "to go on: searchrl sft --resume, or the same searchrl run"
                    )
            # still under the deferred SIGTERM: one arriving now lets the final model be written, then the run ends
            if not self.val:
                self.save(self.out_dir / "final")
            elif (self.out_dir / "best").exists():  # else a run stopped right after this left it in final
                with atomic_dir(self.out_dir / "final") as tmp:
                    tmp.rmdir()
                    (self.out_dir / "best").rename(tmp)
                console.log(f"kept epoch {self.best_epoch} (lowest validation loss {self.best_val:.4f}) as final")
            elif self.best_epoch < 0:  # every validation loss was nan or inf: no epoch to keep
                raise ValueError(
                    "SFT diverged: no epoch's validation loss was finite, so no model was kept; lower sft.lr (or "
                    "raise sft.warmup_steps) and run again"
                )
            shutil.rmtree(self.checkpoint, ignore_errors=True)  # the final model is written: nothing to go on from
        console.log(f"SFT done: {step} steps, {time.perf_counter() - t0:.0f} s, model in {self.out_dir / 'final'}")
        return history

    def _write(self, log: Any, row: dict[str, Any]) -> None:
        """One row of ``metrics.jsonl``; a full disk is said in one line naming it."""
        with full_said(self.out_dir / "metrics.jsonl", LOG_KEPT):
            log.write(json.dumps(row) + "\n")
            log.flush()

    @property
    def checkpoint(self) -> Path:
        return self.out_dir / "checkpoint"

    @functools.cached_property
    def _data_digest(self) -> str:
        """What the examples were (token ids and masks, training and validation sides): a resume checks it."""
        h = hashlib.sha256()
        for side in (self.examples, self.val):
            for e in side:
                h.update(json.dumps(_parts(e)).encode())
            h.update(b"|")
        return h.hexdigest()

    def _save_checkpoint(self, step: int, epoch: int, done_in_epoch: int, epoch_rng: Any) -> None:
        place = {"step": step, "epoch": epoch, "done_in_epoch": done_in_epoch, "epoch_rng": epoch_rng}
        state = {
            "optimizer": self.opt.state_dict(),
            "scheduler": self.sched.state_dict(),
            "sft": {**place, "best_val": self.best_val, "best_epoch": self.best_epoch, "data": self._data_digest},
        }
        save_checkpoint(self.checkpoint, self.model, self.tokenizer, state, on_model=self._record)

    def _record(self, model_dir: Path) -> None:
        """``searchrl.json`` of a saved model: the run's protocol and rollout settings (``rollout.agent_file``)."""
        from searchrl.pipeline import make_protocol

        record_agent(model_dir, self.cfg, make_protocol(self.cfg), self.tokenizer)

    def _load_checkpoint(self, rng: random.Random) -> tuple[int, int, int]:
        """Weights, optimizer, scheduler and random states from the checkpoint; ``rng`` set to the stopped epoch's
        start. Returns (step, epoch, batches of that epoch done); the log keeps the rows up to the checkpoint."""
        state = load_checkpoint(self.checkpoint, self.model)
        if state["sft"].get("data") != self._data_digest:
            raise ResumeRefused(
                f"{self.checkpoint}: the SFT examples differ from the stopped run's (its data changed)",
                "start afresh: searchrl sft without --resume, or searchrl run --from the stage",
            )
        self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])
        s = state["sft"]
        rng.setstate(s["epoch_rng"])
        self.best_val, self.best_epoch = s["best_val"], s["best_epoch"]
        # a checkpoint from an epoch's last batch: that epoch's validation runs again, and its row is written again
        rerun, at = s["done_in_epoch"] > 0, s["step"]
        trim_logs(self.out_dir, at, drop=lambda row: rerun and row.get("step") == at and "val_loss" in row)
        console.log(f"SFT resumes at step {s['step']} (epoch {s['epoch']}, batch {s['done_in_epoch']})")
        return s["step"], s["epoch"], s["done_in_epoch"]

    @torch.no_grad()
    def validation_loss(self) -> float:
        """Token-mean NLL over every validation example's target tokens."""
        self.model.eval()
        total, count = 0.0, 0
        for s in range(0, len(self.val), self.scfg.batch_size):
            batch = self.val[s : s + self.scfg.batch_size]
            for part_idx in self._micro(batch):  # the training's micro-batches: the same bound on memory
                part = [batch[i] for i in part_idx]
                with placement.autocast(self.device):  # global_tokens=1: the summed NLL
                    total += float(sft_loss(self.scorer, part, self.pad, self.device, global_tokens=1.0))
                count += sum(sum(_parts(e)[2]) for e in part)
        return total / max(count, 1)

    def _micro(self, batch: Sequence[Any]) -> list[list[int]]:
        """Length-bucketed micro-batches within a batch: at most ``sft.micro_batch_size`` rows and
        ``sft.micro_batch_tokens`` padded tokens each (bounds activation memory; the loss is unchanged)."""
        parts = [_parts(e) for e in batch]
        rows = self.scfg.micro_batch_size or len(batch)
        return plan_micro_batches(
            [len(p) for p, _, _ in parts],
            [len(r) for _, r, _ in parts],
            rows,
            self.scfg.micro_batch_tokens,
            [tuple(p) for p, _, _ in parts],
        )

    def _batches(self, rng: random.Random, bs: int) -> list[list[int]]:
        """Shuffled batches of similar lengths: rows are padded to the longest in their batch, so sorting within
        windows of 8 batches cuts padding a lot while the order stays random."""
        order = list(range(len(self.examples)))
        rng.shuffle(order)
        length = [len(_parts(self.examples[i])[0]) + len(_parts(self.examples[i])[1]) for i in range(len(order))]
        batches = []
        for w in range(0, len(order), 8 * bs):
            window = sorted(order[w : w + 8 * bs], key=length.__getitem__)
            batches += [window[s : s + bs] for s in range(0, len(window), bs)]
        rng.shuffle(batches)
        return batches

    def save(self, path: Path) -> None:
        """Atomic (a temp dir renamed over ``path``); a LoRA model is saved merged while the live model keeps
        training its attached adapters. With its ``searchrl.json``."""
        with atomic_dir(path) as tmp:
            save_merged(self.model, self.tokenizer, tmp)
            self._record(tmp)
