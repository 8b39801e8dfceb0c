"""Evaluation: baselines and the agent behind one ``answer(examples)`` interface, the harness that scores them on
datasets, and the reports (markdown / CSV / JSON / PNG)."""

from searchrl.eval.baselines import (
    AgentMethod,
    CoTMethod,
    DirectMethod,
    IterativeRAGMethod,
    Method,
    NaiveRAGMethod,
    Prediction,
)
from searchrl.eval.harness import (
    EvalResult,
    build_methods,
    eval_generator,
    evaluate,
    metric_settings,
    run_from_config,
)
from searchrl.eval.methods import METHODS, register_method
from searchrl.eval.report import aggregate, render_markdown, write_reports
from searchrl.eval.rescore import rescore_file

__all__ = [
    "METHODS",
    "AgentMethod",
    "CoTMethod",
    "DirectMethod",
    "EvalResult",
    "IterativeRAGMethod",
    "Method",
    "NaiveRAGMethod",
    "Prediction",
    "aggregate",
    "build_methods",
    "eval_generator",
    "evaluate",
    "metric_settings",
    "register_method",
    "render_markdown",
    "rescore_file",
    "run_from_config",
    "write_reports",
]
