"""Stage behaviours a mutation audit of the training, sampling, data and evaluation stages found unpinned."""

from __future__ import annotations

from pathlib import Path

from searchrl import runner
from searchrl.config import record_run, validate_dict


def _ctx(stage: dict, cfg, run_dir: Path, model: str = "m", resume: bool = False):
    st = runner.StageConfig.model_validate(stage)
    sdir = run_dir / st.name
    sdir.mkdir(parents=True, exist_ok=True)
    return runner.StageContext(st, cfg, sdir, run_dir, model, None, None, resume)


def _fake_sft_run(monkeypatch, seen: list) -> None:
    """run_sft's model, data and trainer stood in for: the trainer records the config and whether it resumed."""
    import searchrl.models
    import searchrl.sft.trainer
    from searchrl.stages import train

    class Trainer:
        def __init__(self, cfg, model, tok, data, out):
            self.cfg, self.out = cfg, Path(out)

        def train(self, resume=False):
            seen.append(resume)
            record_run(self.cfg, self.out)
            return []

    monkeypatch.setattr(searchrl.models, "load_policy", lambda spec, dtype=None: ("model", "tok"))
    monkeypatch.setattr(train, "sft_examples", lambda cfg, protocol, tok: ["example"])
    monkeypatch.setattr(searchrl.sft.trainer, "SFTTrainer", Trainer)


def test_an_sft_run_whose_starting_model_was_retrained_in_place_does_not_resume(tmp_path: Path, monkeypatch) -> None:
    from searchrl.stages import run_sft
    from searchrl.stages.resume import sft_resume_mismatch

    model = tmp_path / "base"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights v1")
    cfg = validate_dict({"name": "t", "model": {"policy": str(model)}})
    seen: list[bool] = []
    _fake_sft_run(monkeypatch, seen)
    run_sft(cfg, tmp_path / "out")
    assert sft_resume_mismatch(cfg, tmp_path / "out") is None  # the same weights: it may go on
    (model / "model.safetensors").write_bytes(b"weights v2, longer")
    assert sft_resume_mismatch(cfg, tmp_path / "out") == (
        f"the starting model {model} changed since the checkpoint (an earlier stage ran again)"
    )
    run_sft(cfg, tmp_path / "out", resume=True)  # a resume leaves the noted model as the run started from it
    assert sft_resume_mismatch(cfg, tmp_path / "out") is not None
    assert seen == [False, True]


def test_an_sft_stage_whose_starting_model_was_retrained_in_place_starts_again(tmp_path: Path, monkeypatch) -> None:
    from searchrl import stages
    from searchrl.stages.resume import record_sft_init

    model = tmp_path / "base"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights v1")
    seen: list[bool] = []
    monkeypatch.setattr(stages, "run_sft", lambda cfg, out, resume=False: seen.append(resume) or [])
    cfg = validate_dict({"name": "t"})
    ctx = _ctx({"name": "sft", "kind": "sft"}, cfg, tmp_path / "run", model=str(model), resume=True)
    started = validate_dict({"name": "t", "model": {"policy": str(model)}})  # the config the stage ran with
    record_run(started, ctx.dir)
    record_sft_init(started, ctx.dir)
    (ctx.dir / "checkpoint").mkdir()
    runner._sft(ctx)
    assert seen == [True] and ctx.resume is True
    (model / "model.safetensors").write_bytes(b"weights v2, longer")
    runner._sft(ctx)
    assert seen == [True, False] and ctx.resume is False and not (ctx.dir / "checkpoint").exists()
    assert f"stage sft: the starting model {model} changed since the checkpoint" in (
        (tmp_path / "run" / "run.log").read_text()
    )
