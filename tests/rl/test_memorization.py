"""R1-Searcher++'s memorization loss: which rollouts are rewritten, what a valid rewrite is, what the NLL sees, and
that the trainer's update really carries coef * NLL (and nothing when coef = 0)."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest
import torch

from searchrl.config import MemorizationConfig, load_config
from searchrl.data.loaders import load_qa
from searchrl.data.records import QAExample
from searchrl.data.synth import generate_world, write_world
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.protocols import get_protocol
from searchrl.retrieval import build_index, load_index
from searchrl.rl.batch import TokenScorer, collate, score_tokens
from searchrl.rl.hooks import AuxNLL, NLLSequence
from searchrl.rl.memorization import Memorizer, extract_documents, rewriter_prompt
from searchrl.rl.trainer import Trainer
from searchrl.rollout.engine import build_prompt_text
from searchrl.rollout.trajectory import Trajectory, Turn
from searchrl.sft.oracle import oracle_trajectories
from searchrl.sft.rewriter import internal_path, internalize, rewriter_sft_examples, rewriter_sft_from_trajectories
from searchrl.testing import LettersProtocol, letters_trainer, tiny_model

PP = get_protocol("r1_searcher_pp")
GOOD = (
    "<|begin_internal_answer|>I remember that Lyon lies in France.<|end_internal_answer|>\n"
    "So the answer is \\boxed{France}."
)


def traj(qid: str, answer: str | None, searches: int, golds=("France",), sample: int = 0) -> Trajectory:
    prompt_ids = ByteTokenizer().encode(build_prompt_text(PP, ByteTokenizer(), f"Where is {qid}?"))  # as the engine
    t = Trajectory(f"{qid}#{sample}", qid, qid, f"Where is {qid}?", list(golds), prompt_ids=prompt_ids)
    for i in range(searches):
        obs = f" <|begin_search_result|>\n(1)Doc {qid}-{i}: Lyon is a city in France.\n<|end_search_result|>"
        t.turns.append(
            Turn(
                text=f"<|begin_external_search|>q{i}<|end_external_search|>",
                action="search",
                finish_reason="stop",
                queries=[f"q{i}"],
                hit_ids=[["d"]],
                observation=obs,
            )
        )
    t.turns.append(Turn(text=f"\\boxed{{{answer}}}", action="answer", finish_reason="eos"))
    t.answer = answer
    return t


def memorizer(script, **cfg) -> Memorizer:
    tok = ByteTokenizer()
    return Memorizer(MemorizationConfig(coef=0.1, **cfg), ScriptedGenerator(tok, script), PP, tok)


def test_select_takes_correct_searching_rollouts_once_per_question() -> None:
    m = memorizer(lambda ctx: GOOD)
    trajs = [
        traj("a", "France", 1, sample=0),
        traj("a", "France", 2, sample=1),  # same question: per_question = 1
        traj("b", "Spain", 1),  # wrong
        traj("c", "France", 0),  # correct without retrieval
        traj("d", None, 1),  # no answer
    ]
    assert [t.uid for t in m.select(trajs)] == ["a#0"]
    m2 = memorizer(lambda ctx: GOOD, include_no_retrieval=True, per_question=2)
    assert [t.uid for t in m2.select(trajs)] == ["a#0", "a#1", "c#0"]
    m3 = memorizer(lambda ctx: GOOD, max_rewrites_per_step=1, include_no_retrieval=True)
    assert len(m3.select(trajs)) == 1
    # the answer reward's test: the last \boxed{} of the response, at most 10 words
    long = traj("e", "France, a big country of western Europe by the sea and Alps", 1)
    late = traj("f", "Spain", 1)
    late.turns.append(Turn(text="No, \\boxed{France}", action="answer", finish_reason="eos"))
    assert [t.uid for t in m.select([long, late])] == ["f#0"]


def test_documents_come_from_observations_without_tags() -> None:
    docs = extract_documents(traj("a", "France", 2), PP)
    assert docs == ["(1)Doc a-0: Lyon is a city in France.", "(1)Doc a-1: Lyon is a city in France."]
    assert not any("<|" in d for d in docs)
    tok = ByteTokenizer()
    prompt = rewriter_prompt(tok, "Where is Lyon?", docs)
    assert "Activated Knowledge Matrix" in prompt and docs[1] in prompt and prompt.rstrip().endswith("Lyon?")
    assert "<|begin_internal_answer|>" in prompt and "\\boxed{YOUR_ANSWER}" in prompt
    assert "Activated Knowledge Matrix:\nNone" in rewriter_prompt(tok, "Where is Lyon?", [])


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (GOOD, ""),
        ("I know it. So the answer is \\boxed{France}.", "no internal step"),
        (GOOD.replace("France}", "Spain}"), "wrong answer"),
        (GOOD.replace("\\boxed{France}", "France"), "format"),
        (GOOD.replace("So the", "<|begin_internal_answer|>So the"), "format: an unclosed or stray internal tag"),
        (GOOD.replace("So the", "<|end_internal_answer|>So the"), "format: an unclosed or stray internal tag"),
        ("<|begin_external_search|>lyon<|end_external_search|> \\boxed{France}", "searched"),
        (GOOD.replace("I remember", "The provided text says"), "mentions 'provided'"),
        (GOOD.replace("{France}", "{France, a big country of western Europe by the sea and Alps}"), "answer too long"),
    ],
)
def test_validation(text: str, reason: str) -> None:
    got = memorizer(lambda ctx: text).validate(text, ["France"])
    assert got.startswith(reason) if reason else got == ""


def test_hook_rewrites_validates_pools_and_conditions_on_the_question_only() -> None:
    replies = {"a": GOOD, "b": GOOD.replace("France}", "Spain}")}
    m = memorizer(lambda ctx: replies["a" if "Where is a?" in ctx else "b"], pool_size=3, batch_size=2)
    seqs = m(0, [traj("a", "France", 1), traj("b", "France", 1)])
    rewriter_ctx = m.rewriter.calls[0]
    assert any("Doc a-0: Lyon is a city in France." in c for c in rewriter_ctx)  # documents reach the rewriter
    assert [r.ok for r in m.last_rewrites] == [True, False] and m.last_rewrites[1].reason == "wrong answer"
    assert m.last_metrics["memorization/valid"] == 1 and m.last_metrics["memorization/pool"] == 1
    assert len(seqs) == 1
    prompt_ids, resp_ids, mask = seqs[0]
    tok = ByteTokenizer()
    assert prompt_ids == tok.encode(build_prompt_text(PP, tok, "Where is a?"))  # the policy's prompt, no documents
    assert "Doc a-0" not in tok.decode(prompt_ids)
    assert tok.decode(resp_ids, skip_special_tokens=True) == GOOD and resp_ids[-1] == tok.eos_token_id
    assert mask == [1] * len(resp_ids)
    for step in range(1, 4):  # the pool keeps the last 3 valid paths; each step uses at most batch_size = 2
        assert len(m(step, [traj("a", "France", 1)])) == min(2, step + 1)
    assert len(m.pool) == 3


def test_rewriter_sft_targets_pass_the_memorizer_validation(tmp_path: Path) -> None:
    write_world(generate_world(120, seed=5), tmp_path)
    retriever = load_index(build_index(tmp_path / "corpus.jsonl", "bm25", tmp_path / "bm25"))
    tok = ByteTokenizer()
    examples = load_qa(tmp_path / "train.jsonl", limit=12)
    oracle = oracle_trajectories(PP, examples, retriever, tok, topk=2)
    data = rewriter_sft_examples(oracle, PP, tok)
    m = memorizer(lambda ctx: "")
    for ex, t, d in zip(examples, oracle, data, strict=True):
        prompt = tok.decode(d.prompt_ids)
        assert ex.question in prompt and extract_documents(t, PP)[0] in prompt
        target = tok.decode(d.response_ids, skip_special_tokens=True)
        assert target == internal_path(ex.metadata["chain"], ex.answers[0])
        assert m.validate(target, ex.answers) == "", target
        assert sum(d.loss_mask) == len(d.response_ids)
        assert d.response_ids[-1] == tok.eos_token_id  # the rewriter learns to end its reply


def _retrieval_trajectory(thought: str) -> Trajectory:
    t = Trajectory("x#0", "x", "x", "Where is Lyon?", ["France"], prompt_ids=[5])
    obs = " <|begin_search_result|>\n(1)Lyon: Lyon is a city in France.\n<|end_search_result|>"
    t.turns = [
        Turn(
            text="I need the country of Lyon. <|begin_external_search|>Lyon country<|end_external_search|>",
            action="search",
            finish_reason="stop",
            queries=["Lyon country"],
            observation=obs,
        ),
        Turn(text=f"{thought} So the answer is \\boxed{{France}}.", action="answer", finish_reason="eos"),
    ]
    return t


def test_internalize_turns_searches_into_internal_steps() -> None:
    text = internalize(_retrieval_trajectory("Lyon is a city in France."), PP)
    assert text == (
        "I need the country of Lyon.\n<|begin_internal_answer|>Lyon is a city in France.<|end_internal_answer|>\n"
        "So the answer is \\boxed{France}."
    )
    m = memorizer(lambda ctx: "")
    assert m.validate(text, ["France"]) == ""
    tok = ByteTokenizer()
    good, bad = _retrieval_trajectory("Lyon is in France."), _retrieval_trajectory("The search result says France.")
    # an opening that credits the documents goes; the rest of the sentence is what the model knows now
    credited = _retrieval_trajectory(
        "Based on the search results, Lyon is in France. According to the documents, it is."
    )
    assert "<|begin_internal_answer|>Lyon is in France. It is.<|end_internal_answer|>" in internalize(credited, PP)
    data, rejected = rewriter_sft_from_trajectories(
        [good, bad, credited], Memorizer(MemorizationConfig(), None, PP, tok), tok
    )
    assert len(data) == 2 and rejected == {"mentions 'search result'": 1}
    prompt = tok.decode(data[0].prompt_ids)
    assert "(1)Lyon: Lyon is a city in France." in prompt and "Where is Lyon?" in prompt
    assert "<|begin_external_search|>" not in tok.decode(data[0].response_ids)
    unsearched = _retrieval_trajectory("Lyon is in France.")
    unsearched.turns = unsearched.turns[1:]  # answered without a search: no documents to put in the prompt
    data, rejected = rewriter_sft_from_trajectories([unsearched], Memorizer(MemorizationConfig(), None, PP, tok), tok)
    assert data == [] and rejected == {"no search": 1}


def test_rewriter_sft_data_speaks_the_run_protocols_formats() -> None:
    """The rewriter's SFT prompts and targets use the run's protocol (its step and answer formats), as the memorizer
    prompts the rewriter during RL; a protocol that words them differently was trained on R1-Searcher++'s own."""
    from searchrl.protocols.r1_searcher_pp import R1SearcherPPProtocol

    class Worded(R1SearcherPPProtocol):
        def format_answer(self, answer: str) -> str:
            return f"Final: \\boxed{{{answer}}}."

    proto, tok = Worded(), ByteTokenizer()
    t = _retrieval_trajectory("Lyon is a city in France.")
    t.metadata["chain"] = [{"sub_question": "Which country is Lyon in?", "answer": "France"}]
    (oracle,) = rewriter_sft_examples([t], proto, tok)
    (real,), _ = rewriter_sft_from_trajectories([t], Memorizer(MemorizationConfig(), None, proto, tok), tok)
    at_rl = rewriter_prompt(tok, t.question, extract_documents(t, proto), "auto", proto)
    assert "Final: \\boxed{YOUR_ANSWER}." in at_rl
    assert tok.decode(oracle.prompt_ids) == tok.decode(real.prompt_ids) == at_rl
    assert tok.decode(oracle.response_ids, skip_special_tokens=True).endswith("Final: \\boxed{France}.")
    assert oracle.response_ids[-1] == real.response_ids[-1] == tok.eos_token_id


class _ConstantReward:
    def __call__(self, trajs):
        return [1.0] * len(trajs), {"reward/total": 1.0}


def _target_logp(model, seq) -> float:
    b = collate([seq[0]], [seq[1]], [seq[2]], pad_id=0)
    with torch.no_grad():
        logp, _ = score_tokens(TokenScorer(model), b, b.action_mask)
    return float(logp.sum())


@pytest.mark.parametrize("coef", [0.0, 1.0])
def test_trainer_update_carries_coef_times_nll(tmp_path: Path, coef: float) -> None:
    """A constant reward gives GRPO zero advantages, so only the memorization NLL can move the weights."""
    tok = ByteTokenizer()
    seq = (tok.encode("Q: where?\nA:"), tok.encode("the answer is lyon") + [2], [1] * 19)
    calls: list[int] = []

    def hook(step, trajs):
        calls.append(step)
        return [seq]

    cfg = load_config(
        None,
        [
            "algorithm.name=grpo",
            "algorithm.kl_coef=0.0",
            "algorithm.mini_batch_size=4",
            "training.lr=1e-2",
            "training.steps=3",
            "training.prompts_per_step=2",
            f"training.output_dir={tmp_path}",
            "training.save_every=0",
            "training.tensorboard=false",
            "rollout.group_size=4",
            "rollout.max_new_tokens=6",
            "rollout.max_turns=1",
            "rollout.force_answer=false",
            f"memorization.coef={coef}",
        ],
    )
    model = tiny_model()
    before = _target_logp(model, seq)
    questions = [QAExample(f"q{i}", f"letters {i}", ["x"]) for i in range(4)]
    trainer = Trainer(
        cfg,
        model,
        tok,
        LettersProtocol(),
        None,
        questions,
        reward_fn=_ConstantReward(),
        aux_nll_hook=hook,
        micro_batch_size=4,
    )
    history = trainer.train()
    after = _target_logp(trainer.policy, seq)
    if coef == 0:
        assert calls == [] and after == pytest.approx(before, abs=1e-6)
    else:
        assert calls == [0, 1, 2]  # once per step, although each step has 2 mini-batches
        assert after > before + 1.0, (before, after)
        assert all(h["loss/memorization_nll"] > 0 for h in history)
    rows = (tmp_path / "rollouts.jsonl").read_text().splitlines()
    assert len(rows) == 3 * 4  # training.log_rollouts = 4 per step


def test_rewriter_formats_come_from_the_protocol() -> None:
    """The rewriter's step and answer formats, the documents' wrapper tags and the answer marker are the protocol's."""
    tok = ByteTokenizer()
    prompt = rewriter_prompt(tok, "Where is Lyon?", ["Lyon is in France."], protocol=PP)
    assert PP.format_recalled(" your reasoning and answer for it ").strip() in prompt
    assert PP.format_answer("YOUR_ANSWER") in prompt
    with pytest.raises(ValueError, match="marks none"):
        rewriter_prompt(tok, "Where is Lyon?", [], protocol=get_protocol("search_r1"))
    with pytest.raises(ValueError, match="recalled steps and an answer marker"):
        internalize(_retrieval_trajectory("Lyon is a city in France."), get_protocol("search_r1"))
    obs = "<information>Doc 1: Lyon is in France.</information>"
    assert get_protocol("search_r1").observation_documents(obs).strip() == "Doc 1: Lyon is in France."


def test_a_memorizer_restored_from_its_saved_state_draws_as_one_never_stopped() -> None:
    """The pool and the stream that samples it go into the RL checkpoint: before, a resumed run started with an
    empty pool and a fresh stream, so its memorization loss differed from the uninterrupted run's."""
    m = memorizer(lambda ctx: GOOD, pool_size=4, batch_size=2)
    for step, qid in enumerate("abc"):
        m(step, [traj(qid, "France", 1)])
    saved = io.BytesIO()
    torch.save(m.state_dict(), saved)  # as the checkpoint stores it
    restored = memorizer(lambda ctx: GOOD, pool_size=4, batch_size=2)
    restored.load_state_dict(torch.load(io.BytesIO(saved.getvalue()), weights_only=False))
    for step, qid in enumerate("defg", start=3):
        assert restored(step, [traj(qid, "France", 1)]) == m(step, [traj(qid, "France", 1)])
    assert list(restored.pool) == list(m.pool) and len(m.pool) == 4


class _PoolHook(AuxNLL):
    """A hook that keeps state across steps, as the memorizer's pool: each step's first response joins a pool, and
    two pool entries are drawn at random for the step's NLL term."""

    def __init__(self) -> None:
        self.pool: list[NLLSequence] = []
        self.rng = random.Random(0)

    def __call__(self, step, trajs):
        t = trajs[0]
        self.pool.append((list(t.prompt_ids), list(t.response_ids) + [2], [1] * (len(t.response_ids) + 1)))
        return self.rng.sample(self.pool, min(2, len(self.pool)))

    def state_dict(self) -> dict:
        return {"pool": list(self.pool), "rng": self.rng.getstate()}

    def load_state_dict(self, state: dict) -> None:
        self.pool, _ = list(state["pool"]), self.rng.setstate(state["rng"])


def test_a_resumed_run_carries_the_hooks_state_on(tmp_path: Path) -> None:
    """Stopped after its checkpoint at step 2 and resumed, the run ends with the weights and memorization losses of
    the run never stopped: the checkpoint holds the auxiliary-NLL hook's state."""
    cfg = load_config(
        None,
        [
            "algorithm.name=grpo",
            "algorithm.mini_batch_size=4",
            "training.lr=1e-2",
            "training.steps=4",
            "training.prompts_per_step=2",
            "training.save_every=2",
            "training.tensorboard=false",
            "rollout.group_size=2",
            "rollout.max_new_tokens=6",
            "rollout.max_turns=1",
            "rollout.force_answer=false",
            "memorization.coef=1.0",
        ],
    )
    questions = [QAExample(f"q{i}", f"letters {i}", ["x"]) for i in range(4)]

    def trainer(out: Path) -> Trainer:
        run = cfg.model_copy(update={"training": cfg.training.model_copy(update={"output_dir": str(out)})})
        return letters_trainer(run, questions, aux_nll_hook=_PoolHook(), micro_batch_size=4)

    straight = trainer(tmp_path / "a")
    whole = straight.train()
    stopped = trainer(tmp_path / "b")
    real_step = stopped.train_step

    def step_then_stop():
        if stopped.state.step == 3:  # step 3 ran after the checkpoint of step 2; step 4 dies
            raise KeyboardInterrupt
        return real_step()

    stopped.train_step = step_then_stop
    with pytest.raises(KeyboardInterrupt):
        stopped.train()
    resumed = trainer(tmp_path / "b")
    rest = resumed.train(resume=True)
    assert [h["loss/memorization_nll"] for h in rest] == [h["loss/memorization_nll"] for h in whole[2:]]
    assert resumed.aux_nll_hook.pool == straight.aux_nll_hook.pool
    for (name, p), q in zip(resumed.policy.named_parameters(), straight.policy.parameters(), strict=True):
        assert torch.equal(p, q), name


def test_the_rewriter_samples_with_the_runs_seed_mixed_with_the_step() -> None:
    """Two runs with different seeds once drew the same rewriter samples at every step (the seed was the step)."""

    class Seeds(ScriptedGenerator):
        def __init__(self, tok, script) -> None:
            super().__init__(tok, script)
            self.seeds: list[int | None] = []

        def generate(self, prompts, params):
            self.seeds.append(params.seed)
            return super().generate(prompts, params)

    def run(seed: int, step: int) -> int | None:
        tok = ByteTokenizer()
        gen = Seeds(tok, lambda ctx: GOOD)
        Memorizer(MemorizationConfig(coef=0.1), gen, PP, tok, seed=seed)(step, [traj("a", "France", 1)])
        assert len(gen.seeds) == 1
        return gen.seeds[0]

    assert run(0, 3) == run(0, 3)
    assert len({run(0, 3), run(1, 3), run(0, 4)}) == 3
