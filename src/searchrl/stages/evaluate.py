"""The evaluation stage: the methods of ``evaluation.methods`` on its datasets (:mod:`searchrl.eval.harness`)."""

from __future__ import annotations

from pathlib import Path

from searchrl.config import RunConfig, validate_dict


def evaluation(
    cfg: RunConfig,
    *,
    model: str | None = None,
    out: str | Path | None = None,
    datasets: list[str] | None = None,
    corpus: str | Path | None = None,
):
    """Evaluate ``model`` (default: ``training.init_from`` or ``model.policy``) on ``datasets`` (default:
    ``evaluation.datasets``) into ``out`` (default: ``evaluation.output_dir``); ``corpus`` builds or checks the
    index. Returns the :class:`searchrl.eval.harness.EvalResult`."""
    from searchrl.eval.harness import run_from_config

    raw = cfg.model_dump()
    if model is not None:
        raw["training"]["init_from"] = model
    if out is not None:
        raw["evaluation"]["output_dir"] = str(out)
    if datasets is not None:
        raw["evaluation"]["datasets"] = [str(d) for d in datasets]
    return run_from_config(validate_dict(raw, cfg.name or "<eval>"), corpus=corpus)
