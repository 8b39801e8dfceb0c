"""What the user docs (README.md, docs/*.md) name exists in the code, and what they state as a default is the default.

tests/foundation/test_docs_commands.py checks the `searchrl` command lines the docs show; this file checks the names
and facts in the prose around them: every config key, `--flag`, link and anchor, repository path, `searchrl.*`
Python name, `Class.attribute`, keyword argument of a call, `SEARCHRL_*` variable and YAML config block; every
"`key` (default V)" statement against the config's and the command's defaults; and that docs/architecture.md's
package layout names every module and its layer diagram is tests/foundation/test_layering.py's. The code is read
as text and syntax trees (nothing imported but the config and the command tree), so the whole file takes about a
second.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, get_args

import pytest
import typer
import yaml
from pydantic import BaseModel

import searchrl
from searchrl.cli import app
from searchrl.config import RunConfig
from searchrl.config.sections import StageConfig

ROOT = Path(searchrl.__file__).resolve().parents[2]
SRC = ROOT / "src" / "searchrl"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"``\s?(.+?)\s?``|`([^`]+)`", re.S)  # a span may run over a line break
FLAG = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")
#: flags of other tools the docs name: pip, accelerate, vLLM's server, huggingface-cli, Slurm's sbatch
OTHER_TOOLS_FLAGS = {"--extra-index-url", "--no-deps", "--config_file", "--max-model-len", "--repo-type", "--signal"}
#: dotted names in code spans that are not config keys though they start like one
NOT_KEYS = {"model.generate"}  # transformers' generate, in docs/rollout.md
FILE_SUFFIXES = {"md", "py", "json", "jsonl", "yaml", "onnx", "safetensors", "txt", "csv", "html", "png"}


def _text(doc: Path) -> str:
    return doc.read_text(encoding="utf-8")


def spans(text: str) -> list[str]:
    """The inline code spans of markdown text (fenced blocks left out), paired within each paragraph, their line
    breaks made spaces."""
    paragraphs = re.split(r"\n\s*\n", FENCE.sub("", text))
    return [" ".join((a or b).split()) for par in paragraphs for a, b in SPAN.findall(par)]


def test_every_paragraph_closes_its_code_spans() -> None:
    """A lone backtick pairs with the next one and turns the prose between them into code."""
    bad = [
        f"{doc.name}: {par[:80]!r}"
        for doc in DOCS
        for par in re.split(r"\n\s*\n", FENCE.sub("", _text(doc)))
        if SPAN.sub("", par).count("`")
    ]
    assert not bad, f"paragraphs with a lone backtick (write a literal one as `` ` ``): {bad}"
    assert spans("a `b`, `` ` `` and `c\nd`\n\n`e`") == ["b", "`", "c d", "e"]


def _code(doc: Path) -> Iterator[str]:
    """The doc's code: its inline spans and the lines of its shell and YAML blocks."""
    text = _text(doc)
    for m in FENCE.finditer(text):
        if m.group(1).split()[:1] in (["bash"], ["yaml"], ["sh"]):
            yield from m.group(2).replace("\\\n", " ").splitlines()
    yield from spans(text)


# ------------------------------------------------------------------------------------------------------ config keys


def _model_of(annotation: Any) -> type[BaseModel] | None:
    for a in (annotation, *get_args(annotation)):
        for b in (a, *get_args(a)):
            if isinstance(b, type) and issubclass(b, BaseModel):
                return b
    return None


def config_key_problem(dotted: str, model: type[BaseModel] = RunConfig) -> str | None:
    """None when ``dotted`` names a config value: a field path, a list entry by index
    (``reward.components.1.params``), a pipeline stage by name (``pipeline.rl.set.training.steps``, whose ``set``
    holds config keys), anything under a free-form dict field, or ``prefix_*`` naming some fields; else what is
    wrong."""
    parts = [p for p in re.sub(r"\[(\d+)\]", r".\1", dotted).split(".") if p]
    while parts:
        part = parts.pop(0)
        if part.isdigit():
            continue
        if part.endswith("*"):
            ok = any(f.startswith(part[:-1]) for f in model.model_fields)
            return None if ok else f"no field of {model.__name__} starts with {part[:-1]!r}"
        if part not in model.model_fields:
            return f"{model.__name__} has no field {part!r}"
        field = model.model_fields[part]
        sub = _model_of(field.annotation)
        if sub is StageConfig and parts and parts[0] not in StageConfig.model_fields and not parts[0].isdigit():
            parts.pop(0)  # a stage by its name
        if model is StageConfig and part == "set":
            return config_key_problem(".".join(parts)) if parts else None
        if sub is None:
            return None  # a value, or a free-form dict whose keys are the user's
        model = sub
    return None


def doc_config_keys() -> list[tuple[str, str]]:
    sections = set(RunConfig.model_fields)
    out = set()
    for doc in DOCS:
        for code in _code(doc):
            for m in re.finditer(r"(?<![\w./$-])([a-z_]+(?:(?:\.[\w*]+)|\[\d+\])+)", code):
                key = m.group(1).rstrip(".")
                last = key.rsplit(".", 1)[-1]
                if key.split(".")[0] in sections and key not in NOT_KEYS and last not in FILE_SUFFIXES:
                    out.add((doc.name, key))
    return sorted(out)


def test_the_docs_name_many_config_keys_and_the_check_can_fail() -> None:
    assert len(doc_config_keys()) > 150
    assert config_key_problem("training.steps") is None
    assert config_key_problem("pipeline.rl.set.training.steps") is None
    assert config_key_problem("reward.components[1].params.penalty") is None
    assert config_key_problem("sft.oracle_*") is None
    assert config_key_problem("training.stepz") == "TrainingConfig has no field 'stepz'"
    assert config_key_problem("pipeline.rl.set.training.nope") == "TrainingConfig has no field 'nope'"
    assert config_key_problem("rollout.nothing_*") is not None


@pytest.mark.parametrize(("doc", "key"), doc_config_keys())
def test_a_config_key_the_docs_name_exists(doc: str, key: str) -> None:
    problem = config_key_problem(key)
    assert problem is None, f"{doc} names `{key}`, which is no config key: {problem}"


# ------------------------------------------------------------------------------------------------------------ flags


@cache
def searchrl_flags() -> dict[str, list[Any]]:
    """Every option of every `searchrl` command: its defaults, one per command that has it."""
    out: dict[str, list[Any]] = {}

    def walk(command: Any) -> None:
        for param in command.params:
            for opt in [*param.opts, *param.secondary_opts]:
                out.setdefault(opt, []).append(param.default)
        for sub in getattr(command, "commands", {}).values():
            walk(sub)

    walk(typer.main.get_command(app))
    return out


def _sections(text: str) -> Iterator[str]:
    """A doc's sections (from one heading to the next), fenced blocks included."""
    yield from re.split(r"^#+ .*$", FENCE.sub(lambda m: m.group(0).replace("#", ""), text), flags=re.M)


@cache
def _script_text(name: str) -> str:
    """A benchmark script's text, and that of the benchmark modules it imports (a script may hand its flags on)."""
    path = ROOT / "benchmarks" / name
    if not path.exists():
        return ""
    text = path.read_text(encoding="utf-8")
    imported = re.findall(r"^\s*(?:from|import) (\w+)", text, re.M)
    return text + "".join(_script_text(f"{m}.py") for m in imported if f"{m}.py" != name)


def flag_problems(section: str) -> list[str]:
    """The `--flags` of a doc's section that no `searchrl` command has, nor a benchmark script the section names."""
    scripts = "".join(_script_text(s) for s in set(re.findall(r"benchmarks/(\w+\.(?:py|sh))", section)))
    known = {*searchrl_flags(), "--help", *OTHER_TOOLS_FLAGS}
    return [flag for flag in FLAG.findall(section) if flag not in known and f'"{flag}' not in scripts]


def test_a_flag_the_docs_name_exists() -> None:
    bad = [f"{doc.name}: {flag}" for doc in DOCS for sec in _sections(_text(doc)) for flag in flag_problems(sec)]
    assert not bad, f"the docs name flags that no command (nor the benchmark named beside them) has: {bad}"
    assert flag_problems("`searchrl serve --max-pendingz 3`") == ["--max-pendingz"]
    assert flag_problems("`benchmarks/bench_continuous.py --nonesuch`") == ["--nonesuch"]
    assert flag_problems("`benchmarks/peer_trl_grpo.py --device cuda --ours-args=x`") == []  # via peer_trl_gpu.py


# --------------------------------------------------------------------------------------------------------- defaults

NUM = r"-?\d[\d,]*(?:\.\d+)?(?:e-?\d+)?"
_KEY, _FLAG, _UNIT = r"[a-z_]+(?:\.[a-z_0-9]+)+", r"--[a-z][\w-]*", r"(?:\s*(?:s|ms|GiB|tokens))?"
LIT = rf"(?:{NUM}|true|false|null|[a-z_]+)"
#: statements of a default: "`key` (default V)", "`key: V` (the default)", "`key` (V)", "(`--flag`, V)"
DEFAULT_STATEMENTS = [
    rf"`(?P<k>{_KEY}|{_FLAG})(?:[: ][^`]*)?`\s*\(default:? `?(?P<v>{LIT})`?{_UNIT}[,;:)]",
    rf"`(?P<k>{_KEY}): (?P<v>{LIT})`\s*\(the default[,;)]",
    rf"`(?P<k>{_KEY}|{_FLAG})`\s*\((?P<v>{NUM}|true|false|null){_UNIT}[,;)]",
    rf"\(`(?P<k>{_KEY}|{_FLAG})`, (?:default )?(?P<v>{NUM}|true|false|null){_UNIT}\)",
]


def _literal(text: str) -> Any:
    if re.fullmatch(NUM, text):
        return float(text.replace(",", ""))
    return {"true": True, "false": False, "null": None}.get(text, text)


def _same(stated: Any, actual: Any) -> bool:
    if isinstance(stated, float) and isinstance(actual, int | float) and not isinstance(actual, bool):
        return stated == float(actual)
    return stated is actual if stated in (True, False, None) else stated == actual


def config_default(key: str) -> Any:
    obj: Any = RunConfig()
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


def stated_defaults(text: str) -> list[tuple[str, Any, str]]:
    """``(key or flag, stated default, the sentence's words)`` of every default statement in ``text``."""
    flat = re.sub(r"\s*\n\s*", " ", text)
    return [
        (m.group("k"), _literal(m.group("v")), m.group(0))
        for pattern in DEFAULT_STATEMENTS
        for m in re.finditer(pattern, flat)
    ]


def default_problem(key: str, stated: Any) -> str | None:
    if key.startswith("--"):
        actual = searchrl_flags().get(key, [])
        return None if any(_same(stated, a) for a in actual) else f"the command's default is {actual}"
    if config_key_problem(key) is not None:
        return config_key_problem(key)
    actual = config_default(key)
    return None if _same(stated, actual) else f"the default is {actual!r}"


def test_a_default_the_docs_state_is_the_default() -> None:
    statements = [(doc.name, *s) for doc in DOCS for s in stated_defaults(_text(doc))]
    assert len(statements) >= 12
    bad = [f"{doc}: {words!r}: {p}" for doc, key, v, words in statements if (p := default_problem(key, v))]
    assert not bad, "\n".join(bad)
    wrong = stated_defaults("`training.save_every` (default 5) and (`--max-pending`, 100)")
    assert [default_problem(k, v) for k, v, _ in wrong] == ["the default is 10", "the command's default is [16384]"]


# ------------------------------------------------------------------------------------------- links, paths, variables


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    """GitHub's anchors of a markdown file's headings (a repeated one gets -1, -2, ...)."""
    out, seen = set(), {}
    for m in re.finditer(r"^#+\s+(.*)$", FENCE.sub("", _text(doc)), re.M):
        slug = _slug(m.group(1))
        out.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return out


def link_problems(doc: Path) -> list[str]:
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", FENCE.sub("", _text(doc))):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if not file.exists():
            bad.append(f"{doc.name}: link to {target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            bad.append(f"{doc.name}: link to {target}: no such heading in {file.name}")
    return bad


def test_links_and_anchors_resolve() -> None:
    assert _slug("Tool calls through the chat template (`rollout.protocol: tool_call`)") == (
        "tool-calls-through-the-chat-template-rolloutprotocol-tool_call"
    )
    bad = [p for doc in DOCS for p in link_problems(doc)]
    assert not bad, "\n".join(bad)


@cache
def _benchmark_sources() -> str:
    return "".join(
        p.read_text(encoding="utf-8") for p in (ROOT / "benchmarks").glob("*.*") if p.suffix in (".py", ".sh")
    )


def path_problem(path: str) -> str | None:
    """None when a repository path the docs name exists (a glob: matches something); a placeholder (``NAME``,
    ``<stage>``, ``{json,md}``) is not checked, nor a benchmark's result file that some benchmark script writes."""
    if re.search(r"[<{]|NAME|_[A-Z]\b", path):
        return None
    if any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists():
        return None
    if path.startswith("benchmarks/results/") and Path(path).name in _benchmark_sources():
        return None
    return "no such file"


def test_repository_paths_the_docs_name_exist() -> None:
    bad = []
    for doc in DOCS:
        for m in re.finditer(r"(?<![\w/.-])((?:src|tests|benchmarks|docs)/[\w./*<>{},-]*[\w*>}])", _text(doc)):
            if problem := path_problem(m.group(1)):
                bad.append(f"{doc.name}: {m.group(1)}: {problem}")
    assert not bad, "\n".join(bad)
    assert path_problem("src/searchrl/no_such_module.py") == "no such file"


def test_environment_variables_the_docs_name_are_read() -> None:
    source = "".join(p.read_text(encoding="utf-8") for p in SRC.rglob("*.py"))
    named = {v for doc in DOCS for v in re.findall(r"\bSEARCHRL_[A-Z_]+\b", _text(doc))}
    assert "SEARCHRL_CACHE" in named
    unread = sorted(v for v in named if f'"{v}"' not in source)
    assert not unread, f"the docs name environment variables nothing reads: {unread}"


# ------------------------------------------------------------------------------------------------------ Python names


@cache
def _parsed() -> dict[Path, ast.Module]:
    """Every module of the package, parsed once for all the checks below."""
    return {path: ast.parse(path.read_text(encoding="utf-8")) for path in sorted(SRC.rglob("*.py"))}


def _definitions(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The functions and classes of a module's body, and those inside its classes."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node
        if isinstance(node, ast.ClassDef):
            yield from _definitions(node.body)


def _tree(module: str) -> ast.Module | None:
    base = SRC.parent.joinpath(*module.split("."))
    return _parsed().get(base.with_suffix(".py")) or _parsed().get(base / "__init__.py")


def _class_attributes(node: ast.ClassDef) -> set[str]:
    """Methods, class attributes, fields and ``self.x`` assignments of a class."""
    names = set()
    for sub in node.body:
        if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(sub.name)
        elif isinstance(sub, ast.Assign | ast.AnnAssign):
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Attribute)
            and isinstance(sub.ctx, ast.Store)
            and getattr(sub.value, "id", "") == "self"
        ):
            names.add(sub.attr)
    return names


@cache
def _module_names(module: str) -> dict[str, ast.AST | str]:
    """A module's top-level names: definitions, and imports / lazy exports as the dotted name they stand for."""
    tree = _tree(module)
    out: dict[str, ast.AST | str] = {}
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, ast.ImportFrom) and node.module:
            out.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets
        ):
            out.update(
                {k.value: f"{v.value}.{k.value}" for k, v in zip(node.value.keys, node.value.values, strict=True)}
            )
    for node in tree.body if tree else ():
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                out.update({n.id: node for n in ast.walk(t) if isinstance(n, ast.Name)})
    return out


def resolves(dotted: str, depth: int = 0) -> bool:
    """Whether ``searchrl.a.b.C.attr`` names a module, a top-level name of one (followed through re-exports) or an
    attribute of a class defined there."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        module, rest = ".".join(parts[:i]), parts[i:]
        if _tree(module) is None:
            continue
        if not rest:
            return True
        found = _module_names(module).get(rest[0])
        if isinstance(found, str):
            return depth < 5 and resolves(".".join([found, *rest[1:]]), depth + 1)
        if found is None:
            return _tree(f"{module}.{rest[0]}") is not None and resolves(".".join([module, *rest]), depth + 1)
        if len(rest) == 1:
            return True
        return isinstance(found, ast.ClassDef) and len(rest) == 2 and rest[1] in _class_attributes(found)
    return not dotted.startswith("searchrl")


@cache
def package_classes() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for tree in _parsed().values():
        for node in _definitions(tree.body):
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, set()).update(_class_attributes(node))
    return out


def test_python_names_the_docs_name_exist() -> None:
    bad = []
    for doc in DOCS:
        text = _text(doc)
        for name in set(re.findall(r"(?<![\w/])(searchrl(?:\.[A-Za-z_]\w*)+)", text)) - {"searchrl.json"}:
            if not resolves(name):
                bad.append(f"{doc.name}: {name}")
        for span in spans(text):
            for cls, attr in re.findall(r"\b([A-Z][A-Za-z0-9]+)\.([a-z_]\w*)", span):
                if cls in package_classes() and attr not in package_classes()[cls]:
                    bad.append(f"{doc.name}: {cls}.{attr}")
    assert not bad, f"the docs name what the package does not define: {bad}"
    assert resolves("searchrl.RolloutEngine.from_config") and resolves("searchrl.eval.stats")
    assert not resolves("searchrl.RolloutEngine.from_recipe") and not resolves("searchrl.rollout.nothing")


@cache
def _signatures() -> dict[str, list[set[str] | None]]:
    """Function and class names -> the parameter names of each definition (None: it takes ``**kwargs``)."""
    out: dict[str, list[set[str] | None]] = {}
    for tree in _parsed().values():
        for node in _definitions(tree.body):
            fn = node
            if isinstance(node, ast.ClassDef):
                init = [b for b in node.body if isinstance(b, ast.FunctionDef) and b.name == "__init__"]
                fields = {
                    b.target.id for b in node.body if isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name)
                }
                if not init:
                    out.setdefault(node.name, []).append(fields or None)
                    continue
                fn = init[0]
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                a = fn.args
                names = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
                out.setdefault(node.name, []).append(None if a.kwarg else names)
    return out


def call_keywords(span: str) -> list[tuple[str, str]]:
    """``(function, keyword)`` of every ``name(..., kw=...)`` in a code span, each keyword with its own call."""
    out, stack = [], []
    for m in re.finditer(r"([A-Za-z_]\w*)?\(|\)|(?<![\w.])([a-z_]\w*)=(?!=)", span):
        if m.group(0).endswith("("):
            stack.append(m.group(1))
        elif m.group(0) == ")":
            stack = stack[:-1]
        elif stack and stack[-1]:
            out.append((stack[-1], m.group(2)))
    return out


def test_keyword_arguments_the_docs_pass_exist() -> None:
    bad = []
    for doc in DOCS:
        for span in spans(_text(doc)):
            for fn, kw in call_keywords(span):
                sigs = _signatures().get(fn)
                if sigs and not any(s is None or kw in s for s in sigs):
                    bad.append(f"{doc.name}: {fn}(..., {kw}=)")
    assert not bad, f"the docs pass keywords the package's functions do not take: {bad}"
    assert call_keywords('declare(Algorithm("g", grouped=True))') == [("Algorithm", "grouped")]
    assert call_keywords("load_index(..., nprobe=, ef_search=)") == [
        ("load_index", "nprobe"),
        ("load_index", "ef_search"),
    ]


# --------------------------------------------------------------------------------------------------------- YAML blocks


def test_yaml_config_blocks_validate() -> None:
    blocks = [(doc.name, b) for doc in DOCS for info, b in FENCE.findall(_text(doc)) if info.strip() == "yaml"]
    checked = 0
    for doc, body in blocks:
        data = yaml.safe_load(body)
        if not isinstance(data, dict) or "plugins" in data:  # a plugin's names: tests/foundation/test_extending_doc.py
            continue
        assert set(data) <= set(RunConfig.model_fields), f"{doc}: a YAML block with keys no config has: {body}"
        RunConfig.model_validate(data)
        checked += 1
    assert checked >= 4


# ----------------------------------------------------------------------------------------------------- architecture


def _layout_entries() -> dict[str, str]:
    """docs/architecture.md's package layout: entry (``data/``, ``models.py``) -> its text."""
    text = _text(ROOT / "docs" / "architecture.md")
    block = re.search(r"## Package layout.*?```\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md lost its package layout"
    entries: dict[str, str] = {}
    current = None
    for line in block.group(1).splitlines():
        if m := re.match(r"  (\S+)", line):
            current = m.group(1)
            entries[current] = line
        elif current:
            entries[current] += " " + line
    return entries


def test_the_package_layout_names_every_module() -> None:
    entries = _layout_entries()
    missing = []
    for path in sorted(SRC.iterdir()):
        if path.is_dir() and (path / "__init__.py").exists():
            words = set(re.findall(r"\w+(?:\.py)?", entries.get(f"{path.name}/", "")))
            missing += [
                f"{path.name}/{f.name}" for f in sorted(path.glob("*.py")) if words.isdisjoint({f.name, f.stem})
            ]
            missing = [m for m in missing if not m.endswith("/__init__.py")]
        elif path.suffix == ".py" and path.name != "__init__.py" and path.name not in entries:
            missing.append(path.name)
    assert not missing, f"docs/architecture.md's package layout does not name {missing}"


def test_the_layer_diagram_is_the_layering_tests() -> None:
    tree = ast.parse((ROOT / "tests" / "foundation" / "test_layering.py").read_text(encoding="utf-8"))
    assign = next(n for n in tree.body if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "LAYERS")
    tested = [set(layer) - {"searchrl"} for layer in ast.literal_eval(assign.value)]
    block = re.search(r"## Layers.*?```\n(.*?)```", _text(ROOT / "docs" / "architecture.md"), re.S)
    assert block
    drawn: list[set[str]] = []
    for line in block.group(1).splitlines():
        head, _, rest = line.strip().partition(" ")
        new_layer = head in ("application", "<", "foundation")
        units = re.split(r"\s{2,}", (rest if new_layer else line).strip())[0]
        names = {u.strip() for u in units.split(",") if u.strip()}
        if new_layer:
            drawn.append(names)
        elif drawn:  # a layer's second line
            drawn[-1] |= names
    assert drawn[::-1] == tested, "docs/architecture.md's layer diagram differs from test_layering.LAYERS"


def test_the_commands_said_to_take_a_profile_are_those_that_do() -> None:
    """docs/recipes.md lists the commands that take ``--profile``: every command that takes a recipe, and no other."""
    commands: dict[str, set[str]] = {}

    def walk(command: Any, path: str) -> None:
        commands[path] = {o for p in command.params for o in p.opts}
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())

    walk(typer.main.get_command(app), "")
    with_profile = {c for c, opts in commands.items() if "--profile" in opts}
    with_recipe = {c for c, opts in commands.items() if opts & {"--recipe", "--config"}}
    assert with_recipe <= with_profile | {"config show", "config validate"}, with_recipe - with_profile
    sentence = re.search(
        r"takes a recipe takes `--profile`:(.*?)\. Example", _text(ROOT / "docs" / "recipes.md"), re.S
    )
    assert sentence, "docs/recipes.md no longer lists the commands that take --profile"
    listed = {" ".join(w for w in s.split() if not w.startswith("-")) for s in spans(sentence.group(1))}
    assert listed == with_profile, f"docs/recipes.md lists {sorted(listed)}, the commands are {sorted(with_profile)}"
