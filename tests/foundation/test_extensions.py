"""Your own protocol, retriever, evaluation method and algorithm, added from a plugin file that a config's
``plugins:`` lists: the config accepts their names, the pipeline builds them, and a name taken twice is refused."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

from searchrl.config import ALGORITHMS, ConfigError, load_config
from searchrl.config import extensions as ext
from searchrl.data.loaders import load_qa
from searchrl.data.records import QAExample
from searchrl.eval import methods as eval_methods
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.protocols import PROTOCOLS, SearchR1Protocol, get_protocol, register_protocol
from searchrl.retrieval import RETRIEVERS
from searchrl.rl.advantages import ESTIMATORS
from searchrl.rollout.engine import RolloutEngine, RolloutLimits

PLUGIN = '''
from searchrl.config.algorithms import Algorithm, declare
from searchrl.eval import register_method
from searchrl.eval.method import Method, Prediction
from searchrl.protocols import SearchR1Protocol, register_protocol
from searchrl.retrieval import register_retriever
from searchrl.retrieval.base import Hit
from searchrl.rl import algorithms as A
from searchrl.rl.advantages import register


class QueryTags(SearchR1Protocol):
    search_tags = ("<query>", "</query>")
    result_tags = ("<result>", "</result>")


class Echo:
    """Ten hits per query, whatever k asks for."""

    def __init__(self, cfg):
        self.prefix = cfg.options.get("prefix", "")

    def search(self, queries, k):
        return [[Hit(f"{q}-{i}", "T", f"{self.prefix}{q} {i}", 1.0) for i in range(10)] for q in queries]


class Shout(Method):
    name = "shout"

    def answer(self, examples):
        return [Prediction(text=ex.question.upper()) for ex in examples]


register_protocol("query_tags", QueryTags)
register_retriever("echo", Echo)
register_method("shout", lambda cfg, generator, retriever: Shout(generator))
declare(Algorithm("my_grpo", grouped=True))


@register("my_grpo")
def my_grpo(scores_B, kl_BT, values_BT, mask_BT, group_ids, cfg, **_):
    """GRPO's group baseline without the std division, scaled by the batch's score range."""
    adv_BT, metrics = A.grpo_advantages(scores_B, group_ids, mask_BT, norm_by_std=False)
    spread = float(scores_B.max() - scores_B.min())
    return adv_BT / max(spread, 1e-6), None, {**metrics, "my_grpo/spread": spread}
'''


@pytest.fixture
def registries():
    """The registries as they were, restored after the test (a plugin registers into process-wide tables)."""
    saved = [
        (ext.NAMES, copy.deepcopy(ext.NAMES)),
        (PROTOCOLS, dict(PROTOCOLS)),
        (RETRIEVERS, dict(RETRIEVERS)),
        (eval_methods.CUSTOM_METHODS, dict(eval_methods.CUSTOM_METHODS)),
        (ALGORITHMS, dict(ALGORITHMS)),
        (ESTIMATORS, dict(ESTIMATORS)),
    ]
    retrieval_methods = set(eval_methods.RETRIEVAL_METHODS)
    modules, loaded = dict(ext._MODULES), set(sys.modules)
    yield
    ext._MODULES.clear()
    ext._MODULES.update(modules)
    for name in set(sys.modules) - loaded:  # the plugin files run in this test, under any name
        if name.startswith(("searchrl_plugin_", "searchrl_user_")) or name in ("my_ext", "mine", "ext"):
            del sys.modules[name]
    for table, before in saved:
        table.clear()
        table.update(before)
    eval_methods.RETRIEVAL_METHODS.clear()
    eval_methods.RETRIEVAL_METHODS.update(retrieval_methods)


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch, registries) -> Path:
    (tmp_path / "my_ext.py").write_text(PLUGIN)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "my_ext.py"


def test_a_plugins_names_are_valid_config_values_and_build_what_it_registered(plugin: Path) -> None:
    from searchrl.pipeline import make_protocol, make_retriever_for

    with pytest.raises(ConfigError, match="unknown protocol 'query_tags'.*register it in a module that plugins"):
        load_config(None, ["rollout.protocol=query_tags"])  # not without the plugin
    cfg = load_config(
        None,
        [
            "plugins=[my_ext.py]",
            "rollout.protocol=query_tags",
            "retrieval.kind=echo",
            "retrieval.options={prefix: 'doc about '}",
            "evaluation.methods=[shout, direct]",
            "algorithm.name=my_grpo",
            "rollout.group_size=2",
        ],
    )
    protocol = make_protocol(cfg)
    assert protocol.name == "query_tags" and protocol.stop_strings == ("</query>",)
    assert "<query> query </query>" in protocol.instruction("Who?") and "<search>" not in protocol.instruction("Who?")
    retriever = make_retriever_for(cfg)  # a service: no index is looked for or built
    assert retriever.search(["x"], 3)[0][0].text == "doc about x 0"

    # a rollout in the renamed tags; the retriever's ten hits are cut to topk
    script = {
        False: "<think> look </think>\n<query> paris </query>",
        True: "<think> ok </think>\n<answer> Paris </answer>",
    }
    gen = ScriptedGenerator(ByteTokenizer(), lambda ctx: script["doc about" in ctx])
    limits = RolloutLimits(
        max_turns=3, max_searches=2, max_new_tokens=80, max_obs_tokens=400, max_total_tokens=4000, topk=2
    )
    (traj,) = RolloutEngine(gen, retriever, protocol, limits).run([QAExample("q1", "Capital?", ["Paris"])])
    assert traj.answer == "Paris" and traj.n_searches == 1
    assert '<result>Doc 1(Title: "T") doc about paris 0\nDoc 2(Title: "T") doc about paris 1</result>' in (
        traj.response_text(ByteTokenizer())
    )
    assert protocol.check_format(traj.response_text(ByteTokenizer())).ok


def test_a_plugins_algorithm_trains(plugin: Path, tmp_path: Path) -> None:
    from searchrl.rl.trainer import Trainer
    from searchrl.testing import LettersProtocol, letter_fraction_reward, tiny_model, tokenizer

    overrides = ["plugins=[my_ext.py]", "algorithm.name=my_grpo", "algorithm.kl_coef=0.0", "training.steps=2"]
    overrides += ["training.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=8"]
    overrides += ["rollout.max_turns=1", "rollout.force_answer=false", "rollout.max_total_tokens=96"]
    overrides += [f"training.output_dir={tmp_path / 'rl'}", "training.save_every=0", "training.tensorboard=false"]
    cfg = load_config(None, overrides)
    questions = [QAExample(f"q{i}", f"write letters {i}", ["x"]) for i in range(4)]
    trainer = Trainer(cfg, tiny_model(), tokenizer(), LettersProtocol(), None, questions, letter_fraction_reward)
    history = trainer.train()
    assert len(history) == 2 and all("my_grpo/spread" in m for m in history)


def test_a_plugins_method_is_evaluated_beside_the_built_in_ones(plugin: Path, tmp_path: Path) -> None:
    from searchrl.eval import build_methods, evaluate

    cfg = load_config(None, ["plugins=[my_ext.py]", "evaluation.methods=[shout]"])
    methods = build_methods(cfg, generator=ScriptedGenerator(ByteTokenizer(), str), retriever=None)
    result = evaluate({"toy": [QAExample("q1", "paris", ["PARIS"])]}, methods, tmp_path / "out", show=False)
    (row,) = [r for r in result.items if r["method"] == "shout"]
    assert row["prediction"] == "PARIS" and row["metrics"]["em"] == 1.0


def test_a_plugins_protocol_is_scored_by_its_own_convention_and_unknown_ones_name_the_fix(plugin: Path) -> None:
    from searchrl.eval.scoring import convention, metric_settings
    from searchrl.protocols import RAGR1Protocol
    from searchrl.testing import LettersProtocol

    load_config(None, ["plugins=[my_ext.py]"])
    # a Search-R1 variant is scored as Search-R1 (char-bounded cover), a RAG-R1 one as RAG-R1; a class may set its
    # own; one written from scratch gets the class default
    assert metric_settings(["cover_em"], protocol="query_tags") == {
        "cover_em": {"normalize": "squad", "boundary": "char"}
    }
    register_protocol("my_rag_r1", type("MyRAGR1", (RAGR1Protocol,), {}))
    register_protocol("mine", type("Mine", (SearchR1Protocol,), {"eval_convention": ("r1_searcher", "word")}))
    register_protocol("letters", LettersProtocol)
    assert [convention(p) for p in ("my_rag_r1", "mine", "letters")] == [
        ("rag_r1", "word"),
        ("r1_searcher", "word"),
        ("squad", "word"),
    ]
    with pytest.raises(ValueError, match="unknown protocol 'nope'.*rescore --plugin FILE.*--normalize and --boundary"):
        metric_settings(["em"], protocol="nope")
    assert metric_settings(["em"], "squad", "word", protocol="nope") == {"em": {"normalize": "squad"}}


def test_names_taken_twice_and_broken_plugins_are_refused_in_one_line(registries, tmp_path, monkeypatch) -> None:
    with pytest.raises(ValueError, match="protocol 'search_r1' is a built-in protocol; register yours under another"):
        register_protocol("search_r1", type("Mine", (SearchR1Protocol,), {}))
    register_protocol("mine", type("Mine", (SearchR1Protocol,), {}))
    with pytest.raises(ValueError, match="protocol 'mine' is an already registered protocol"):
        register_protocol("mine", type("Other", (SearchR1Protocol,), {}))
    cell = "from searchrl.protocols import SearchR1Protocol\nclass Cell(SearchR1Protocol):\n    pass\n"
    for _ in range(2):  # a notebook cell run twice defines the class again: it replaces the first, not refused
        namespace = {"__name__": "__main__"}
        exec(cell, namespace)
        register_protocol("cell", namespace["Cell"])
    assert get_protocol("cell").__class__ is namespace["Cell"]
    cell = (
        "from searchrl.config.algorithms import Algorithm, declare\n"
        "from searchrl.eval import register_method\n"
        "from searchrl.rl.advantages import register\n"
        "declare(Algorithm('cell_algo', grouped=True))\n"
        "@register('cell_algo')\n"
        "def est(scores_B, kl_BT, values_BT, mask_BT, group_ids, cfg, **_):\n"
        "    return None, None, {}\n"
        "def method(cfg, gen, ret):\n"
        "    return None\n"
        "register_method('cell_method', method)\n"
    )
    for _ in range(2):
        exec(cell, {"__name__": "__main__"})
    assert ESTIMATORS["cell_algo"].fn.__qualname__ == "est" and "cell_method" in eval_methods.CUSTOM_METHODS
    with pytest.raises(ValueError, match="estimator 'cell_algo' is registered twice"):
        exec("from searchrl.rl.advantages import register\nregister('cell_algo')(lambda *a, **k: None)\n", {})
    with pytest.raises(TypeError, match="needs a subclass of searchrl.protocols.Protocol"):
        register_protocol("thing", object)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="retriever 'bm25' is a built-in retriever"):
        ext.add_name("retriever", "bm25")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_text("raise RuntimeError('no API key')\n")
    with pytest.raises(ConfigError, match=r"plugins: plugin 'broken.py' cannot be loaded: no API key$"):
        load_config(None, ["plugins=[broken.py]"])
    with pytest.raises(ConfigError, match=r"plugin 'gone.py': there is no file .*gone.py \(nor beside the recipe\)$"):
        load_config(None, ["plugins=[gone.py]"])
    with pytest.raises(ConfigError, match="plugin 'no_such_pkg.ext' cannot be loaded: .*PYTHONPATH"):
        load_config(None, ["plugins=[no_such_pkg.ext]"])
    with pytest.raises(ConfigError, match="retrieval.options configures a plugin's retriever; retrieval.kind=bm25"):
        load_config(None, ["retrieval.options={prefix: x}"])


def test_your_own_field_names_for_a_question_file(tmp_path: Path, capsys) -> None:
    rows = [
        {"uid": "u1", "query_text": "Capital of France?", "gold": ["Paris"], "prompt": "You are a helpful assistant."},
        {"uid": "u2", "query_text": "Capital of Italy?", "gold": "Rome", "prompt": "You are a helpful assistant."},
    ]
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # without a mapping the 'prompt' string is taken for the question, and a note says which field was read
    with pytest.raises(ValueError, match="no 'golden_answers'"):
        load_qa(path)
    assert "the question is read from field 'prompt'" in " ".join(capsys.readouterr().err.split())
    fields = {"question": "query_text", "answers": "gold", "id": "uid"}
    ex = load_qa(path, fields=fields)
    assert [(e.id, e.question, e.answers) for e in ex] == [
        ("u1", "Capital of France?", ["Paris"]),
        ("u2", "Capital of Italy?", ["Rome"]),
    ]
    assert ex[0].metadata == {"prompt": "You are a helpful assistant."}
    assert "note:" not in capsys.readouterr().err  # a mapped question needs no note
    # a file SearchRL wrote from yours (the usual names) reads with the same mapping
    written = tmp_path / "written.jsonl"
    written.write_text("".join(json.dumps(e.to_flashrag()) + "\n" for e in ex))
    assert load_qa(written, fields=fields) == ex
    with pytest.raises(ValueError, match="qa.jsonl:1: no field 'question_text', which fields= maps"):
        load_qa(path, fields={"question": "question_text"})
    with pytest.raises(ValueError, match="fields: unknown part\\(s\\) \\['q'\\]; map any of question, answers, id"):
        load_qa(path, fields={"q": "query_text"})
    cfg = load_config(None, [f"data.source={tmp_path}", "data.train=qa.jsonl", f"data.fields={json.dumps(fields)}"])
    from searchrl.pipeline import load_split

    assert [e.question for e in load_split(cfg, "train")] == ["Capital of France?", "Capital of Italy?"]


def test_renamed_tags_reach_every_text_of_the_search_r1_family(registries) -> None:
    from searchrl.protocols import RAGR1Protocol, ReasonProtocol
    from searchrl.protocols.base import Invalid

    class Reasoning(SearchR1Protocol):
        think_tags = ("<reason>", "</reason>")

    assert Reasoning().check_format("<reason> a </reason>\n<answer> b </answer>").ok
    assert "<reason>" in Reasoning().instruction("Q?") and "<think>" not in Reasoning().instruction("Q?")

    class MultiQuery(RAGR1Protocol):
        search_tags = ("<query>", "</query>")
        result_tags = ("<result>", "</result>")

    p = MultiQuery(multi_query=True)
    texts = [p.instruction("Q?"), p.format_search(["a", "b"]), p.invalid_feedback(Invalid("no_action"))]
    texts.append(p.render_observation(["a"], [[]]))
    assert all("<search>" not in t and "<information>" not in t for t in texts), texts
    assert p.format_search(["a", "b"]) == "<query> a, b </query>" and p.stop_strings == ("</query>",)
    assert p.render_observation(["a"], [[]]).startswith("\n<result>")

    class Final(ReasonProtocol):
        answer_tags = ("<final>", "</final>")

    assert Final().check_format("<think> a </think>\n<final> b </final>").answer == "b"
    assert Final().check_format("<think> a </think>\n<final> b </final>").ok
    assert "<final>" in Final().instruction("Q?") and "<answer>" not in Final().force_answer_text()
    # the built-in protocols keep their texts: a rename is the subclass's alone
    assert "<search> query </search>" in SearchR1Protocol().instruction("Q?")


def test_a_file_named_as_a_plugin_and_as_a_module_runs_once(plugin: Path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(plugin.parent))
    (plugin.parent / "my_rewards.py").write_text("def bonus(inputs):\n    return [1.0] * len(inputs), {}\n")
    cfg = load_config(
        None, ["plugins=[my_ext.py]", "reward.components=[{name: 'my_ext:Echo'}, {name: 'my_rewards.py:bonus'}]"]
    )
    assert cfg.plugins == [str(plugin)]  # kept absolute: a dumped config loads from anywhere
    load_config(None, ["plugins=[my_ext]"])  # the module of the file that already ran: not run again


def test_other_retrievers_drop_a_plugin_retrievers_options(plugin: Path, tmp_path: Path) -> None:
    from searchrl.config import dump_config
    from searchrl.pipeline import with_retriever

    cfg = load_config(None, ["plugins=[my_ext.py]", "retrieval.kind=echo", "retrieval.options={prefix: x}"])
    remote = with_retriever(cfg, urls=["http://127.0.0.1:9"])
    assert remote.retrieval.kind == "remote" and remote.retrieval.options == {}
    local = with_retriever(cfg, index=tmp_path / "idx")
    assert local.retrieval.kind == "bm25" and local.retrieval.options == {}
    dump_config(remote, tmp_path / "config.yaml")  # what a run directory's config.yaml holds loads again
    assert load_config(str(tmp_path / "config.yaml")).retrieval.kind == "remote"


def test_the_pre_run_check_reads_each_question_file_with_its_own_field_names(tmp_path: Path) -> None:
    from searchrl.preflight import plan_pipeline

    (tmp_path / "mine.jsonl").write_text(json.dumps({"query_text": "Capital of France?", "gold": "Paris"}) + "\n")
    (tmp_path / "other.jsonl").write_text(json.dumps({"prompt_text": "Capital of Italy?", "answer": "Rome"}) + "\n")
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"id": "d", "contents": "Paris\nParis is in France."}) + "\n")
    sets = [
        f"{tmp_path / 'mine.jsonl'}",
        {"data": str(tmp_path / "other.jsonl"), "fields": {"question": "prompt_text"}},
    ]
    cfg = load_config(
        None,
        [
            f"data.source={tmp_path}",
            "data.fields={question: query_text, answers: gold}",
            f"evaluation.datasets={json.dumps(sets)}",
            "pipeline=[{name: ev, kind: eval}]",
            "evaluation.methods=[direct]",
        ],
    )
    (plan,) = plan_pipeline(cfg, tmp_path / "run")
    assert [p for _, p in plan.inputs][:2] == [str(tmp_path / "mine.jsonl"), str(tmp_path / "other.jsonl")]


def test_lenient_and_list_valued_mapped_fields(tmp_path: Path) -> None:
    """An R1-Searcher row (question, answer) and a row without an id read under a mapping meant for another file;
    a CSV answers column of another name holds lists as golden_answers does."""
    rows = [{"query_text": "Q1?", "gold": ["a"], "uid": "u1"}, {"question": "Q2?", "answer": "b"}]
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ex = load_qa(path, fields={"question": "query_text", "answers": "gold", "id": "uid"})
    assert [(e.id, e.question, e.answers) for e in ex] == [("u1", "Q1?", ["a"]), ("mixed-2", "Q2?", ["b"])]
    with pytest.raises(ValueError, match="mixed.jsonl:1: no field 'prompt_text'"):  # "prompt" is no question name
        path.write_text(json.dumps({"prompt": "You are helpful.", "answer": "b"}) + "\n")
        load_qa(path, fields={"question": "prompt_text"})
    table = tmp_path / "qa.csv"
    table.write_text('text,gold\nCapital of France?,"[""Paris"", ""City of Light""]"\n')
    (e,) = load_qa(table, fields={"question": "text", "answers": "gold"})
    assert e.answers == ["Paris", "City of Light"]


def test_data_commands_and_rescore_take_field_names_and_plugins(plugin: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from searchrl import cli

    runner = CliRunner()
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps({"uid": f"u{i}", "q": f"Q{i}?", "gold": "x"}) + "\n" for i in range(5)))
    res = runner.invoke(cli.app, ["data", "inspect", str(path), "--field", "question=q", "--field", "answers=gold"])
    assert res.exit_code == 0, res.output
    assert "5" in res.output and "Q0?" in res.output
    mapping = ["--field", "question=q", "--field", "answers=gold", "--field", "id=uid"]
    res = runner.invoke(
        cli.app, ["data", "split", str(path), "--out", str(tmp_path / "sp"), "--heldout", "1", *mapping]
    )
    assert res.exit_code == 0, res.output
    assert {json.loads(line)["question"] for line in (tmp_path / "sp" / "train.jsonl").read_text().splitlines()} <= {
        f"Q{i}?" for i in range(5)
    }
    res = runner.invoke(cli.app, ["data", "split", str(path), "--out", str(tmp_path / "s2"), "--field", "question"])
    assert res.exit_code == 2 and "write PART=NAME" in res.output
    # re-scoring by a plugin's protocol
    preds = tmp_path / "toy__agent.jsonl"
    preds.write_text(json.dumps({"question": "Q?", "golds": ["Paris"], "prediction": "Paris"}) + "\n")
    res = runner.invoke(cli.app, ["eval", "rescore", str(preds), "--protocol", "query_tags", "--plugin", "my_ext.py"])
    assert res.exit_code == 0, res.output


def test_an_oracle_stage_needs_a_protocol_that_writes_calls(registries, tmp_path: Path) -> None:
    from searchrl.preflight import plan_pipeline
    from searchrl.testing import LettersProtocol

    register_protocol("letters", LettersProtocol)
    cfg = load_config("demo", ["rollout.protocol=letters"])
    gap = "stage 'coldstart' writes oracle trajectories, but protocol letters does not define format_search and"
    with pytest.raises(ConfigError, match=gap):
        plan_pipeline(cfg, tmp_path / "run")


def test_an_edited_plugin_invalidates_an_interrupted_evaluations_answers(plugin: Path) -> None:
    from searchrl.eval.resume import settings_key

    cfg = load_config(None, ["plugins=[my_ext.py]"])
    before = settings_key(cfg)
    assert settings_key(cfg) == before
    plugin.write_text(PLUGIN + "\n# edited\n")
    assert settings_key(cfg) != before


def test_a_recipes_plugin_and_reward_files_are_found_beside_it(registries, tmp_path: Path, monkeypatch) -> None:
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "my_ext.py").write_text(PLUGIN)
    (exp / "mine.py").write_text("def bonus(inputs):\n    return [1.0] * len(inputs), {}\n")
    (exp / "r.yaml").write_text(
        "plugins: [my_ext.py]\nrollout: {protocol: query_tags}\nreward: {components: [{name: 'mine.py:bonus'}]}\n"
    )
    monkeypatch.chdir(tmp_path)  # the files are not in the working directory, but beside the recipe
    cfg = load_config("exp/r.yaml")
    assert cfg.plugins == [str(exp / "my_ext.py")] and cfg.reward.components[0].name == f"{exp / 'mine.py'}:bonus"
    (tmp_path / "mine.py").write_text("def bonus(inputs):\n    return [2.0] * len(inputs), {}\n")
    # the working directory first; a file of yours is kept by its absolute path, and logged by its file name
    assert load_config("exp/r.yaml").reward.components[0].name == f"{tmp_path / 'mine.py'}:bonus"


def test_a_split_set_takes_the_runs_field_names_and_old_saved_configs_still_resume(tmp_path: Path) -> None:
    import yaml

    from searchrl.stages.resume import settings_diff

    with pytest.raises(ConfigError, match="the dev split is read with data.fields: set those, not this set's"):
        load_config(None, ["evaluation.datasets=[{data: dev, fields: {question: q}}]"])
    # a config saved before plugins, data.fields and retrieval.options existed: not a changed setting
    cfg = load_config("demo")
    saved = json.loads(cfg.model_dump_json())
    del saved["plugins"], saved["data"]["fields"], saved["retrieval"]["options"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    assert settings_diff(cfg, tmp_path / "config.yaml") == []
    with_plugin = cfg.model_copy(update={"plugins": ["x.py"]})
    assert settings_diff(with_plugin, tmp_path / "config.yaml") == ["plugins"]


def test_a_plugin_retriever_is_checked_and_cut_to_k_in_the_evaluation_baselines_too(plugin: Path) -> None:
    from searchrl.eval.baselines import NaiveRAGMethod
    from searchrl.pipeline import make_retriever_for

    cfg = load_config(None, ["plugins=[my_ext.py]", "retrieval.kind=echo"])
    gen = ScriptedGenerator(ByteTokenizer(), lambda ctx: "Paris")
    (pred,) = NaiveRAGMethod(gen, make_retriever_for(cfg), topk=2).answer([QAExample("q", "Capital?", ["Paris"])])
    assert len(pred.trajectory["hit_ids"][0]) == 2  # the plugin returns ten


def test_a_stage_searching_a_built_index_takes_its_kind_and_drops_a_plugin_retrievers_options(
    plugin: Path, tmp_path: Path
) -> None:
    from searchrl.config import StageConfig
    from searchrl.stages.chain import stage_config

    cfg = load_config(None, ["plugins=[my_ext.py]", "retrieval.kind=echo", "retrieval.options={prefix: x}"])
    idx = tmp_path / "idx"
    idx.mkdir()
    (idx / "manifest.json").write_text('{"kind": "dense"}')
    stage = StageConfig(name="ev", kind="eval")
    built = stage_config(cfg, stage, None, str(idx))
    assert (built.retrieval.kind, built.retrieval.index, built.retrieval.options) == ("dense", str(idx), {})
    empty = stage_config(cfg, stage, None, str(tmp_path / "empty"))  # nothing built there yet: the plugin stays
    assert (empty.retrieval.kind, empty.retrieval.options) == ("echo", {"prefix": "x"})
