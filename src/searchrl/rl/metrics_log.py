"""Where an RL run's per-step metrics go: ``<output_dir>/metrics.jsonl`` always (appended, so a resumed run goes on
in the same file), TensorBoard and Weights & Biases when asked for and installed; sample trajectories go to
``<output_dir>/rollouts.jsonl``."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from searchrl.rollout.record import trajectory_record
from searchrl.storage import full_said
from searchrl.utils import atomic_write_lines, console, error_line

#: what a full disk leaves of a metrics log (the message of its :class:`searchrl.storage.DiskFull`)
LOG_KEPT = "the rows of the steps before are kept (a resume drops a row cut short)"


def _warn(message: str) -> None:
    console.print(f"[yellow]warning:[/yellow] {message}; metrics still go to metrics.jsonl", soft_wrap=True)


class MetricsWriter:
    def __init__(
        self,
        out_dir: Path,
        tensorboard: bool = False,
        wandb: bool = False,
        run_name: str = "",
        run_config: dict[str, Any] | None = None,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.tensorboard, self.wandb = tensorboard, wandb
        self.run_name, self.run_config = run_name, run_config or {}
        self._f = None
        self._tb: Any = None  # None: not opened yet; False: tensorboard is not installed
        #: a resumed run's first step: TensorBoard hides the stopped run's events from it on (written again)
        self.purge_step: int | None = None

    def write(self, m: dict[str, float]) -> None:
        """One line of ``m`` (NaN written as null), keyed by ``m["step"]`` in the optional sinks."""
        path = self.out_dir / "metrics.jsonl"
        with full_said(path, LOG_KEPT):
            if self._f is None:
                self.out_dir.mkdir(parents=True, exist_ok=True)
                self._f = path.open("a", encoding="utf-8")
            self._f.write(json.dumps({k: None if isinstance(v, float) and math.isnan(v) else v for k, v in m.items()}))
            self._f.write("\n")
            self._f.flush()
        if self.tensorboard:
            if self._tb is None:
                try:
                    from torch.utils.tensorboard import SummaryWriter

                    self._tb = SummaryWriter(str(self.out_dir / "tb"), purge_step=self.purge_step)
                except ImportError:
                    self._tb = False
                    _warn("training.tensorboard is on but tensorboard is not installed (pip install tensorboard)")
            if self._tb:
                for k, v in m.items():
                    self._tb.add_scalar(k, v, int(m["step"]))
        if self.wandb:
            self._to_wandb(m)

    def _to_wandb(self, m: dict[str, float]) -> None:
        """Log to Weights & Biases. One run per output directory (a resumed run goes on in it); a missing package
        or a failed login (no API key, no network: ``WANDB_MODE=offline`` logs locally) is one warning, after which
        the run goes on without it rather than losing hours of training to a logging sink."""
        try:
            import wandb
        except ImportError:
            self.wandb = False
            _warn("training.wandb is on but wandb is not installed (pip install wandb)")
            return
        try:
            if wandb.run is None:
                run_id = hashlib.sha1(str(self.out_dir.resolve()).encode()).hexdigest()[:16]
                wandb.init(project="searchrl", name=self.run_name, config=self.run_config, id=run_id, resume="allow")
            wandb.log(m, step=int(m["step"]))
        except Exception as err:  # noqa: BLE001 -- whatever W&B raises (login, network): warn once, train on
            self.wandb = False
            _warn(f"Weights & Biases failed ({error_line(err)}); set WANDB_MODE=offline or run wandb login")

    def close(self) -> None:
        if self._f:
            self._f.close()
            self._f = None
        if self._tb:
            self._tb.close()
            self._tb = None


class UpdateMetrics:
    """A step's update metrics over its forward/backward passes, the same whatever the micro-batch split: each pass's
    means (clip fractions, ratios, entropies, values) weighted by the tokens (or sequences) it counted, so they are
    means over the step's tokens; ``*_min`` / ``*_max`` the extremes over the passes; a pass that counted nothing
    adds nothing (its means are empty). Values of a whole optimizer step (losses, ``grad_norm``) come with weight 1:
    their mean over the step's optimizer steps."""

    def __init__(self) -> None:
        self._sums: dict[str, float] = {}
        self._weights: dict[str, float] = {}
        self._extremes: dict[str, float] = {}

    def add(self, metrics: dict[str, float], weight: float = 1.0) -> None:
        if weight <= 0:
            return
        for k, v in metrics.items():
            if k.endswith(_EXTREMES):
                pick = min if k.endswith("_min") else max
                self._extremes[k] = pick(self._extremes.get(k, v), v)
            else:
                self._sums[k] = self._sums.get(k, 0.0) + weight * v
                self._weights[k] = self._weights.get(k, 0.0) + weight

    def result(self) -> dict[str, float]:
        return {**{k: s / self._weights[k] for k, s in self._sums.items()}, **self._extremes}


def log_rollouts(out_dir: Path, n: int, step: int, trajs: Sequence, scores: Sequence[float], correctness) -> None:
    """Append ``n`` of the step's trajectories (evenly spaced) to ``out_dir/rollouts.jsonl``, for `searchrl view`."""
    if n <= 0 or not trajs:
        return
    idx = sorted({round(i * (len(trajs) - 1) / max(n - 1, 1)) for i in range(min(n, len(trajs)))})
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / "rollouts.jsonl").open("a", encoding="utf-8", errors="backslashreplace") as f:
        for i in idx:
            correct = float(correctness(trajs[i].answer, trajs[i].golds))
            metrics = {"reward": float(scores[i]), "correct": correct}
            row = trajectory_record(trajs[i], source="train", score=float(scores[i]), step=step, metrics=metrics)
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


#: per-process counts add up, as do the shares of a loss normalised over all processes; a step lasts as long as its
#: slowest process and needs its largest memory
_SUMS, _MAXIMA = ("tokens/", "gen/", "memorization/", "loss/"), ("time/", "mem/")
_EXTREMES = ("_min", "_max")  #: the smallest / largest value seen (e.g. policy/ratio_min), by their names' ends
_COUNTS = ("/groups", "/singleton_groups", "filter/rows")  #: counts of groups and rows, by their names' ends


def combine_process_metrics(per_process: Sequence[dict[str, float]]) -> dict[str, float]:
    """One step's metrics of every process -> the step's: counts (``tokens/*``, ``gen/*``, ``memorization/*``, groups
    and rows) and losses (``loss/*``: each process logs its share of the global loss) summed, times and memory
    (``time/*``, ``mem/*``) and ``*_max`` their maximum, ``*_min`` their minimum, anything else (rewards, rates,
    lengths; values every process already shares, such as ``grad_norm``, alike) the mean over the processes that
    report it. Processes roll out equal shares of a step's prompts, so the mean of their means is the step's
    mean."""
    keys = list(dict.fromkeys(k for m in per_process for k in m))
    out: dict[str, float] = {}
    for k in keys:
        values = [float(m[k]) for m in per_process if k in m]
        if k.startswith(_SUMS) or k.endswith(_COUNTS):
            out[k] = sum(values)
        elif k.startswith(_MAXIMA) or k.endswith("_max"):
            out[k] = max(values)
        elif k.endswith("_min"):
            out[k] = min(values)
        elif (
            len(set(values)) == 1
        ):  # shared by every process (the step, the learning rate): as it is, an int stays one
            out[k] = next(m[k] for m in per_process if k in m)
        else:
            out[k] = sum(values) / len(values)
    return out


def trim_logs(out_dir: Path, step: int, drop: Callable[[dict], bool] = lambda row: False) -> None:
    """Before a resumed run appends again: keep only the complete rows of ``metrics.jsonl`` and ``rollouts.jsonl``
    whose ``step`` is at most the checkpoint's ``step`` (and that ``drop`` does not name: rows the resumed run writes
    again). Rows of later steps (the stopped run's, written again by the resumed one) and a last line cut short by
    the stop are dropped; a last row that lost only its newline gets it back. The files are read a line at a time
    (a long run's ``rollouts.jsonl`` holds gigabytes) and rewritten only when something changes."""

    def kept(line: str) -> bool:
        try:
            row = json.loads(line)
        except ValueError:
            return False
        if not isinstance(row, dict):
            return True
        return not (isinstance(row.get("step"), int | float) and row["step"] > step) and not drop(row)

    for path in (Path(out_dir) / "metrics.jsonl", Path(out_dir) / "rollouts.jsonl"):
        if not path.exists():
            continue
        if _ends_a_line(path) and all(kept(line) for line in _log_lines(path)):
            continue
        atomic_write_lines(path, (line + "\n" for line in _log_lines(path) if kept(line)))


def _log_lines(path: Path) -> Iterator[str]:
    """The lines of a log, one at a time, cut at newlines only: the rows' texts (written with ``ensure_ascii=False``)
    may hold U+2028 or U+0085, which ``str.splitlines`` also cuts at."""
    with path.open("rb") as f:
        for raw in f:
            yield raw.rstrip(b"\r\n").decode("utf-8", errors="replace")


def _ends_a_line(path: Path) -> bool:
    """The file is empty or ends with a newline (the next row appended starts a line of its own)."""
    with path.open("rb") as f:
        if f.seek(0, 2) == 0:
            return True
        f.seek(-1, 2)
        return f.read(1) == b"\n"


def run_summary(rows: Sequence[dict[str, Any]], window: int = 10) -> str:
    """One line on a run from its whole ``metrics.jsonl`` (``rows``: every attempt of a resumed run): the last step,
    the mean reward of the last ``window`` steps (one step's reward is noisy), and the held-out EM at the end and at
    its best.

    >>> rows = [{"step": 1, "reward/total": 0.2, "eval/em": 0.1}, {"step": 2, "reward/total": 0.4, "eval/em": 0.3}]
    >>> run_summary(rows + [{"step": 3, "reward/total": 0.6, "eval/em": 0.2}])
    'step 3, reward 0.400 (mean of the last 3 steps), held-out EM 0.200 at the end, best 0.300 at step 2'
    """
    steps = [r for r in rows if r.get("step", 0) > 0 and isinstance(r.get("reward/total"), int | float)]
    if not steps:
        return "no steps logged"
    last = steps[-window:]
    text = f"step {int(steps[-1]['step'])}, reward {sum(r['reward/total'] for r in last) / len(last):.3f} (mean of "
    text += f"the last {len(last)} step{'s' * (len(last) != 1)})"
    evals = [r for r in rows if isinstance(r.get("eval/em"), int | float)]
    if evals:
        best = max(evals, key=lambda r: r["eval/em"])
        text += f", held-out EM {evals[-1]['eval/em']:.3f} at the end, best {best['eval/em']:.3f}"
        text += f" at step {best['step']}"
    return text
