"""The pipeline tests' stand-in stage handlers."""

from __future__ import annotations

import pytest

from searchrl import runner


@pytest.fixture
def fake_handlers(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Every handler writes its output and records the call: stage, model, world, index, data, resume, a few of
    the config's values and the whole config it got."""
    calls: list[dict] = []

    def handler(ctx: runner.StageContext) -> dict:
        out = runner.stage_output(ctx.stage, ctx.run_dir)
        if out.suffix:
            out.write_text("{}\n")
        else:
            out.mkdir(parents=True, exist_ok=True)
        calls.append(
            {
                "name": ctx.stage.name,
                "model": ctx.model,
                "world": ctx.world,
                "index": ctx.index,
                "data": ctx.stage.data,
                "steps": ctx.cfg.training.steps,
                "source": ctx.cfg.data.source,
                "resume": ctx.resume,
                "cfg": ctx.cfg,
            }
        )
        return {"ok": 1}

    for key in runner.HANDLERS:
        monkeypatch.setitem(runner.HANDLERS, key, handler)
    return calls
