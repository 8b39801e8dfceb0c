"""What the RL trainer calls beside the policy: the reward function and the auxiliary-NLL hook
(R1-Searcher++'s memorization loss, ``searchrl.rl.memorization.Memorizer``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

from searchrl.config import RunConfig
from searchrl.protocols.base import Protocol
from searchrl.rewards import RewardComposer, RewardInput
from searchrl.rollout.trajectory import Trajectory

#: ``(trajectories) -> (scores, metrics)``; the default composes cfg.reward's components.
RewardFn = Callable[[Sequence[Trajectory]], tuple[list[float], dict[str, float]]]
#: one extra NLL sequence: ``(prompt_ids, response_ids, loss_mask)``.
NLLSequence = tuple[list[int], list[int], list[int]]


class AuxNLL(ABC):
    """Extra NLL sequences for a step: called once per RL step with its trajectories; their NLL joins the gradient of
    every optimizer step of that RL step."""

    @abstractmethod
    def __call__(self, step: int, trajs: Sequence[Trajectory]) -> list[NLLSequence]: ...

    def metrics(self) -> dict[str, float]:
        """What the last call did (logged with the step's metrics); none by default."""
        return {}

    def state_dict(self) -> dict:
        """What the hook carries from step to step (e.g. a pool of paths, a random stream): saved in the RL
        checkpoint, so a resumed run goes on as one never stopped; none by default. Plain values only (numbers,
        strings, lists, tuples, dicts, tensors): the checkpoint is read with torch's weights-only loader."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned (from a checkpoint); a hook without state has none to restore."""
        del state


class _FunctionAuxNLL(AuxNLL):
    def __init__(self, fn: Callable[[int, Sequence[Trajectory]], list[NLLSequence]]) -> None:
        self.fn = fn

    def __call__(self, step: int, trajs: Sequence[Trajectory]) -> list[NLLSequence]:
        return self.fn(step, trajs)


#: an :class:`AuxNLL`, or a plain ``(step, trajectories) -> [(prompt_ids, response_ids, loss_mask)]`` function.
AuxNLLHook = AuxNLL | Callable[[int, Sequence[Trajectory]], list[NLLSequence]]


def as_aux_nll(hook: AuxNLLHook) -> AuxNLL:
    """``hook`` as an :class:`AuxNLL` (a plain function reports no metrics)."""
    return hook if isinstance(hook, AuxNLL) else _FunctionAuxNLL(hook)


def default_reward_fn(cfg: RunConfig, protocol: Protocol, tokenizer, reader=None, judge=None) -> RewardFn:
    """cfg.reward's components over the trajectories' parsed reports. A ``judge`` component without a ``judge`` asks
    the one ``evaluation.judge_url`` / ``judge_model`` names (or ``SEARCHRL_JUDGE_URL`` / ``SEARCHRL_JUDGE_MODEL``)."""
    if judge is None and any(c.name == "judge" for c in cfg.reward.components):
        from searchrl.rewards.judge import LLMJudge

        judge = LLMJudge.from_config(cfg.evaluation)
    composer = RewardComposer.from_config(cfg.reward, reader=reader, judge=judge)

    def fn(trajs: Sequence[Trajectory]) -> tuple[list[float], dict[str, float]]:
        inputs = [RewardInput.from_trajectory(protocol, t, tokenizer) for t in trajs]
        res = composer(inputs)
        return res.total, res.metrics

    return fn
