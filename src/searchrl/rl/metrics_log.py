"""Where an RL run's per-step metrics go: ``<output_dir>/metrics.jsonl`` always (appended, so a resumed run goes on
in the same file), TensorBoard and Weights & Biases when asked for and installed."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


class MetricsWriter:
    def __init__(self, out_dir: Path, tensorboard: bool = False, wandb: bool = False, run_name: str = "",
                 run_config: dict[str, Any] | None = None) -> None:  # fmt: skip
        self.out_dir = Path(out_dir)
        self.tensorboard, self.wandb = tensorboard, wandb
        self.run_name, self.run_config = run_name, run_config or {}
        self._f = None
        self._tb: Any = None  # None: not opened yet; False: tensorboard is not installed

    def write(self, m: dict[str, float]) -> None:
        """One line of ``m`` (NaN written as null), keyed by ``m["step"]`` in the optional sinks."""
        if self._f is None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self._f = (self.out_dir / "metrics.jsonl").open("a")
        self._f.write(json.dumps({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in m.items()}))
        self._f.write("\n")
        self._f.flush()
        if self.tensorboard:
            if self._tb is None:
                try:
                    from torch.utils.tensorboard import SummaryWriter

                    self._tb = SummaryWriter(str(self.out_dir / "tb"))
                except ImportError:
                    self._tb = False
            if self._tb:
                for k, v in m.items():
                    self._tb.add_scalar(k, v, int(m["step"]))
        if self.wandb:
            try:
                import wandb

                if wandb.run is None:
                    wandb.init(project="searchrl", name=self.run_name, config=self.run_config)
                wandb.log(m, step=int(m["step"]))
            except ImportError:
                pass

    def close(self) -> None:
        if self._f:
            self._f.close()
            self._f = None
        if self._tb:
            self._tb.close()
            self._tb = None
