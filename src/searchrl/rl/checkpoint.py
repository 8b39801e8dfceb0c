"""An RL checkpoint on disk: ``<dir>/model`` (the policy, or a LoRA policy's adapters only, with its tokenizer) and
``<dir>/trainer_state.pt`` (optimizer, scheduler and loop state, the auxiliary-NLL hook's state such as the
memorization pool, and the random generators' states), written atomically: a sibling temp dir renamed over the old
checkpoint.

The state is read with torch's weights-only loader, which rebuilds only tensors and plain Python values (numbers,
strings, lists, tuples, dicts), never arbitrary objects: a checkpoint copied from elsewhere cannot run code on
load. What is saved is kept to those (NumPy's random state as a list of numbers); the NumPy arrays in checkpoints
written before are allowed by name."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import pickle
import random
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate.utils import gather_object

from searchrl.config import ConfigError
from searchrl.models import portable_tokenizer_config, shareable_files
from searchrl.rl.run_dir import STATE_FILE, check_fresh, has_checkpoint
from searchrl.rl.sharded import full_optimizer_state, full_weights, load_full_optimizer_state, load_full_weights
from searchrl.rollout.agent_file import record_agent
from searchrl.storage import atomic_dir
from searchrl.tuning import check_fits, load_policy_weights, save_merged, without_tied_copies
from searchrl.utils import StopRequested


@dataclass
class TrainState:
    """Where the RL loop is: saved in every checkpoint, restored on resume."""

    step: int = 0
    data_epoch: int = 0
    data_pos: int = 0
    kl_coef: float | None = None  # the KL controller's coefficient (adaptive control changes it step by step)
    #: the training questions the data position counts in (:func:`questions_digest`); None: a checkpoint without it
    questions: str | None = None


def questions_digest(examples) -> str:
    """``"<count>:<hash>"`` of the training questions in their order (ids, questions, answers): what the seeded data
    order and a checkpoint's data position are positions in."""
    h = hashlib.sha256()
    for ex in examples:
        h.update(json.dumps([ex.id, ex.question, list(ex.answers)]).encode())
    return f"{len(examples)}:{h.hexdigest()[:16]}"


def save_checkpoint(
    path: Path,
    policy,
    tokenizer,
    state: dict[str, Any],
    weights: dict | None = None,
    on_model: Callable[[Path], None] | None = None,
) -> None:
    """The policy (and tokenizer) under ``path/model``; ``state`` plus the random generators' states beside it.
    ``weights``: the policy's whole weights, gathered beforehand when they are sharded; ``on_model(model_dir)``
    adds to the saved model (its ``searchrl.json``)."""
    with atomic_dir(path) as tmp:
        weights = None if weights is None else without_tied_copies(policy, weights)  # a tied head once
        policy.save_pretrained(tmp / "model", safe_serialization=True, state_dict=weights)
        shareable_files(tmp / "model")
        if hasattr(tokenizer, "save_pretrained"):
            tokenizer.save_pretrained(tmp / "model")
            portable_tokenizer_config(tmp / "model")
        if on_model is not None:
            on_model(tmp / "model")
        kind, keys, *rest = np.random.get_state()  # its keys as a plain list: the safe loader rebuilds no arrays
        rng = {"python": random.getstate(), "numpy": (kind, keys.tolist(), *rest), "torch": torch.get_rng_state()}
        if torch.cuda.is_available():  # dropout on the GPU draws from these
            rng["cuda"] = torch.cuda.get_rng_state_all()
        torch.save({**state, "rng": rng}, tmp / STATE_FILE)


def load_checkpoint(path: Path, policy, sharded: bool = False) -> dict[str, Any]:
    """Loads the saved weights into ``policy`` (each process its shard, when ``sharded``) and restores the random
    generators; the saved ``state``."""
    if not has_checkpoint(path):
        raise FileNotFoundError(f"no checkpoint at {path}; run without --resume to start fresh")
    load_policy_weights(policy, path / "model", load_state=load_full_weights if sharded else None)
    state = load_state(path / STATE_FILE)
    random.setstate(state["rng"]["python"])
    np.random.set_state(state["rng"]["numpy"])
    torch.set_rng_state(state["rng"]["torch"])
    cuda = state["rng"].get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
    return state


#: what checkpoints written before NumPy's random state was saved as a list need (its keys were an array)
_NUMPY_ARRAYS = [np.ndarray, np.dtype, type(np.dtype(np.uint32)), np.ndarray.__reduce__(np.zeros(0))[0]]


def load_state(path: Path) -> dict[str, Any]:
    """A ``trainer_state.pt`` read with torch's weights-only loader (see the module's docstring), memory-mapped:
    every process of a sharded run reads the whole state, its pages shared, not copied. Not on Windows: the loaded
    optimizer state would keep the file mapped, and the next save could not rename the checkpoint directory."""
    try:
        with torch.serialization.safe_globals(_NUMPY_ARRAYS):
            return torch.load(path, weights_only=True, mmap=sys.platform != "win32")
    except pickle.UnpicklingError as err:
        allowed = {f"{g.__module__}.{g.__qualname__}" for g in _NUMPY_ARRAYS}
        unsafe = [g for g in torch.serialization.get_unsafe_globals_in_checkpoint(path) if g not in allowed]
        got = re.search(r"(?:but got|Unsupported global:) ([^\n]+)", str(err))
        unsafe = ", ".join(unsafe) or (got[1].strip() if got else type(err).__name__)
        raise ConfigError(
            f"{path} holds objects the safe checkpoint loader does not rebuild ({unsafe}); an auxiliary-NLL hook's "
            "state_dict must return plain values (numbers, strings, lists, dicts, tensors), or its extension module "
            "must allow its classes with torch.serialization.add_safe_globals"
        ) from None


def save_trainer(tr, path: Path) -> None:
    """A :class:`~searchrl.rl.trainer.Trainer`'s checkpoint. Every process calls it: FSDP-sharded weights and
    optimizer state over several processes (``tr.sharded``) are gathered by all of them; the main process writes."""
    sharded = tr.sharded
    critic = tr.acc.unwrap_model(tr.critic) if tr.critic is not None else None
    weights = full_weights(tr.policy) if sharded else None
    state: dict[str, Any] = {
        "optimizer": full_optimizer_state(tr.model, tr.opt) if sharded else tr.opt.state_dict(),
        "scheduler": tr.sched.state_dict(),
        "train_state": vars(tr.state),
    }
    if critic is not None:
        state["critic"] = full_weights(critic) if sharded else critic.state_dict()
        state["critic_optimizer"] = (
            full_optimizer_state(critic, tr.critic_opt) if sharded else tr.critic_opt.state_dict()
        )
        state["critic_scheduler"] = tr.critic_sched.state_dict()
    if tr.aux_nll_hook is not None:  # e.g. the memorization pool: each process's own, in process order
        hook_states = [tr.aux_nll_hook.state_dict()]
        state["aux_nll"] = gather_object(hook_states) if tr.acc.num_processes > 1 else hook_states
    if tr.acc.is_main_process:
        on_model = functools.partial(record_agent, cfg=tr.cfg, protocol=tr.protocol, tokenizer=tr.tokenizer)
        save_checkpoint(path, tr.policy, tr.tokenizer, state, weights, on_model)


def save_model(tr, path: Path) -> None:
    """A :class:`~searchrl.rl.trainer.Trainer`'s policy as a plain model that ``from_pretrained`` loads (LoRA
    adapters merged into a copy), with its ``searchrl.json`` (:mod:`searchrl.rollout.agent_file`), written whole or
    not at all. Every process calls it: sharded weights are gathered by all of them; the main process writes."""
    weights = full_weights(tr.policy) if tr.sharded else None
    if tr.acc.is_main_process:
        with atomic_dir(path) as tmp:
            save_merged(tr.policy, tr.tokenizer, tmp, weights)
            record_agent(tmp, tr.cfg, tr.protocol, tr.tokenizer)


def load_trainer(tr, path: Path) -> None:
    """Every process reads the checkpoint; sharded weights and optimizer state keep each process's shard."""
    sharded = tr.sharded
    state = load_checkpoint(path, tr.policy, sharded=sharded)
    tr._weights_version += 1
    load_opt = load_full_optimizer_state if sharded else lambda _model, opt, st: opt.load_state_dict(st)
    load_opt(tr.model, tr.opt, state["optimizer"])
    tr.sched.load_state_dict(state["scheduler"])
    saved = TrainState(**state["train_state"])
    now = tr.state.questions
    if saved.questions is not None and now is not None and saved.questions != now:
        raise ConfigError(
            f"cannot resume from {path}: the training questions differ from the checkpoint's ({now.split(':')[0]} "
            f"now, {saved.questions.split(':')[0]} then, or edited), so its data position would point elsewhere; "
            "restore data.train, or start afresh (--force, or another output directory)"
        )
    tr.state = dataclasses.replace(saved, questions=now)
    if tr.state.kl_coef is not None:
        tr.kl_ctrl.value = tr.state.kl_coef
    if tr.critic is not None and "critic" in state:
        critic = tr.acc.unwrap_model(tr.critic)
        check_fits(critic, state["critic"], f"{path}: the critic's weights")
        load_full_weights(critic, state["critic"]) if sharded else critic.load_state_dict(state["critic"])
        load_opt(critic, tr.critic_opt, state["critic_optimizer"])
        if "critic_scheduler" in state:
            tr.critic_sched.load_state_dict(state["critic_scheduler"])
    hook_states = state.get("aux_nll") or []
    if tr.aux_nll_hook is not None and tr.acc.process_index < len(hook_states):
        tr.aux_nll_hook.load_state_dict(hook_states[tr.acc.process_index])


def stop_if_requested(trainer: Any, requested: bool, total: int, saved: bool) -> None:
    """After a step: when any process got SIGTERM, every process saves the checkpoint (unless the step just did) and
    the run ends with :class:`searchrl.utils.StopRequested`, saying how to go on. One all-reduce a step."""
    if trainer.passes.global_count(float(requested)) == 0:
        return
    if not saved:
        trainer.save_checkpoint(trainer.out_dir / "checkpoint")
    trainer._close()
    where = f"step {trainer.state.step} of {total}, checkpoint in {trainer.out_dir / 'checkpoint'}"
    raise StopRequested(f"stopped by SIGTERM at {where}; to go on: searchrl train --resume, or the same searchrl run")


def start_fresh(trainer: Any, force: bool) -> None:
    """Before a fresh run's first step: the main process checks the output directory (:func:`check_fresh`: an
    earlier run there is refused, or with ``force`` removed) and every process follows its decision (one
    all-reduce), so no process waits on a collective that another left by raising."""
    error: FileExistsError | None = None
    if trainer.acc.is_main_process:
        try:
            check_fresh(trainer.out_dir, force)
        except FileExistsError as err:
            error = err
    if trainer.passes.global_count(float(error is not None)) > 0:
        raise error or FileExistsError(f"{trainer.out_dir} holds an earlier run (the main process refused it)")
