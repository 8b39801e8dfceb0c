"""Oracle trajectories for the synthetic world, in any protocol, from each question's recorded reasoning chain.

Per hop: a short reasoning step, one search call with the hop's query, and the documents the configured retriever
really returns for it (rendered by the protocol, inserted with mask 0); then a final reasoning step and the answer.
When the retriever misses the hop's passage the trajectory still shows what it returned: the chain's facts stay
true, and the model learns the format and the search behaviour, not to copy a pasted gold passage.

Protocol-specific pieces (reasoning wrappers, R-Search's evidence block, R1-Searcher++'s internal steps) live in
``_STYLE``; everything else comes from the protocol's own ``format_search`` / ``format_answer`` / renderer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from searchrl.data.records import QAExample
from searchrl.data.synth_open import when
from searchrl.generation.prompts import reply_end_ids
from searchrl.protocols.base import Protocol
from searchrl.retrieval.base import Hit, Retriever
from searchrl.rewards.forms import choice_options
from searchrl.rewards.metrics import cover_em
from searchrl.rollout.engine import build_prompt_text
from searchrl.rollout.observation import cut_observation, observation_tail
from searchrl.rollout.trajectory import Trajectory, Turn
from searchrl.sft.option_years import option_years, side_by_side, years_text


def _reason_before_hop(i: int, hop: dict) -> str:
    lead = "First," if i == 0 else "Next,"
    return f"{lead} I need to know: {hop['sub_question']}"


def _reason_after_hop(hop: dict) -> str:
    return f"The documents say the answer to '{hop['sub_question']}' is {hop['answer']}."


def _plan_lead(i: int, n: int) -> str:
    head = f"This question needs {n} search{'es' if n > 1 else ''}. " if i == 0 else ""
    return f"{head}Search {i + 1} of {n}:"


def _compared(chain: list[dict]) -> list[int]:
    """The hops whose answers a comparison compares: the last hop of each side when the chain is two sides along the
    same relations (the world's bridge comparisons and yes/no questions: the first entity's hops, then the
    second's), else every hop (one hop per entity)."""
    n, half = len(chain), len(chain) // 2
    if n >= 4 and not n % 2 and [h.get("relation") for h in chain[:half]] == [h.get("relation") for h in chain[half:]]:
        return [half - 1, n - 1]
    return list(range(n))


def _same_pair(chain: list[dict], answer: str) -> tuple[str, str] | None:
    """The two end answers of a yes/no "same" comparison (the world's ``yes_no`` questions), else None."""
    ends = _compared(chain)
    if answer.lower() not in ("yes", "no") or len(ends) != 2:
        return None
    return chain[ends[0]]["answer"], chain[ends[1]]["answer"]


def _same_text(pair: tuple[str, str], answer: str) -> str:
    return f"{pair[0]} and {pair[1]} are {'the same' if answer.lower() == 'yes' else 'different'}."


def _plan_items(chain: list[dict], comparison: bool, direction: str = "", same: bool = False) -> list[str]:
    """The decomposition of a chain: each hop's sub-question with earlier answers written as references
    (``#1`` for the first hop's answer, as in QDMR decompositions), then the closing step (for a comparison with
    a known ``direction``: "pick the earlier of #1 and #2."; for a yes/no one, ``same``: "check whether #1 and #2
    are the same.")."""
    items = []
    for i, hop in enumerate(chain):
        text = hop["sub_question"]
        for j in range(i - 1, -1, -1):  # the latest answer first (an answer may contain an earlier one)
            if chain[j]["answer"] and chain[j]["answer"] in text:
                text = text.replace(chain[j]["answer"], f"#{j + 1}")
        items.append(text)
    n = len(chain)
    refs = " and ".join(f"#{j + 1}" for j in _compared(chain))
    if comparison and same:
        items.append(f"check whether {refs} are the same.")
    elif comparison:
        items.append(f"pick the {direction} of {refs}." if direction else f"compare {refs}.")
    else:
        items.append(f"answer #{n}.")
    return items


def _subject(hop: dict, question: str) -> str:
    """The entity a hop asks about: recorded as ``subject`` by newer worlds, else the longest start of its search
    query that the question contains (queries are "<name> <relation words>")."""
    if hop.get("subject"):
        return hop["subject"]
    words = hop["query"].split()
    for k in range(len(words), 0, -1):
        if " ".join(words[:k]) in question:
            return " ".join(words[:k])
    return ""


def question_order(chain: list[dict], question: str) -> list[dict]:
    """A comparison's hops in the order the question names their entities. The world records the answer's
    entity last; an oracle that searched in that order would teach the model to look the winner up second, a
    choice it cannot make before reading the documents."""
    pos = [question.find(s) if (s := _subject(h, question)) else -1 for h in chain]
    if any(p < 0 for p in pos):
        return chain
    return [chain[i] for i in sorted(range(len(chain)), key=lambda i: (pos[i], i))]


def _label(chain: list[dict], j: int, question: str) -> str:
    """The entity compared hop ``j`` speaks for: the subject of its side's first hop."""
    ends = _compared(chain)
    if len(ends) != 2 or ends == [0, 1]:  # one hop per entity
        return _subject(chain[j], question)
    return _subject(chain[0 if j == ends[0] else ends[0] + 1], question)


def _years_side_by_side(chain: list[dict], direction: str, question: str) -> str:
    """ "A 1950, B 1962. 1950 is earlier." for a comparison of years or dates."""
    ends = _compared(chain)
    pick = (min if direction == "earlier" else max)((chain[j]["answer"] for j in ends), key=when)
    return side_by_side([(_label(chain, j, question), chain[j]["answer"]) for j in ends], pick, direction)


def _direction(chain: list[dict], answer: str, question: str) -> str:
    """Whether the comparison's answer is the entity with the smaller year or date ("earlier") or the larger
    ("later"); "" when the hops' answers are not all years or dates."""
    times = {_label(chain, j, question): when(chain[j]["answer"]) for j in _compared(chain)}
    mine = times.get(answer)
    if mine is None or any(t is None for t in times.values()):
        return ""
    return "earlier" if mine == min(times.values()) else "later"


#: what kind of thing a hop's answer is, by the world's relation names ("decompose_explicit" states it first).
_ANSWER_KIND = {
    "birth_year": "a year",
    "death_year": "a year",
    "founding_year": "a year",
    "year": "a year",
    "born_in": "a city",
    "headquarters": "a city",
    "capital": "a city",
    "country": "a country",
    "creator": "a person",
    "founder": "a person",
    "spouse": "a person",
    "employer": "an organisation",
    "publisher": "an organisation",
}


def _recorded(hop: dict, k: int, mode: str) -> str:
    """What a decomposition notes after hop ``k``'s documents: "#2 is Sakfaeldor.", or with ``decompose_facts``
    the fact first, about the hop's subject ("Mokpirn Pivveix was born in Sakfaeldor, so #2 is Sakfaeldor."): the
    subject's name is then written right before the answer is read off the documents."""
    if mode == "decompose_facts" and hop.get("fact"):
        return f"{hop['fact']}, so #{k} is {hop['answer']}."
    return f"#{k} is {hop['answer']}."


def _options_text(options: Sequence[str]) -> str:
    return f"The question names two options, {options[0]} and {options[1]}."


def _steps(
    chain: list[dict], answer: str, comparison: bool, mode: str, question: str = "", options: Sequence[str] = ()
) -> tuple[list[tuple[str, str]], str]:
    """Per hop ``(recorded, before)``: what the model notes about the previous hop's documents ("" on the first
    hop) and its reasoning before the hop's search; then the final reasoning. ``options`` (a choice question's,
    :func:`searchrl.rewards.forms.choice_options`): the final reasoning names them, then sets their years side by
    side when the hops found years, before the answer.

    ``decompose``: the first step writes the whole plan ("Plan: (1) Who wrote X? (2) In which city was #1 born?
    (3) answer #2."); after each hop the model records the answer ("#1 is Y.") and copies the plan's next item
    ("Step (2): ..."), so when to stop is read off the plan (its next item is "answer #n") instead of being counted
    or inferred from the documents. The plan is decided right after the question, where a sub-question that asks
    for something else than the question (a city where the question wants a country) is next to it."""
    n = len(chain)
    same = _same_pair(chain, answer) if comparison else None
    if mode.startswith("decompose"):
        direction = _direction(chain, answer, question) if comparison and not same else ""
        items = _plan_items(chain, comparison, direction, same is not None)
        plan = "Plan: " + " ".join(f"({k + 1}) {item}" for k, item in enumerate(items))
        explicit = mode in ("decompose_explicit", "decompose_facts")
        final = chain[-1]
        kind = (final.get("answer_kind") or _ANSWER_KIND.get(final.get("relation", ""))) if explicit else None
        if kind and not comparison:  # the last sub-question must ask for this (a city is not a country)
            plan = f"The question asks for {kind}. {plan}"
        steps = [
            (
                _recorded(chain[i - 1], i, mode) if i else "",
                f"{plan if i == 0 else ''} Step ({i + 1}): {hop['sub_question']}".strip(),
            )
            for i, hop in enumerate(chain)
        ]
        last = items[-1]
        if comparison and direction:  # the years side by side, then the one the question asks for
            last = f"{last.rstrip('.')}: {_years_side_by_side(chain, direction, question)}"
        elif same:
            last = f"{last.rstrip('.')}: {_same_text(same, answer)}"
        elif comparison:
            last = last.rstrip(".") + ": " + " and ".join(h["answer"] for h in chain) + "."
        if options:
            last = f"{_options_text(options)} {last}"
        return steps, f"{_recorded(chain[-1], n, mode)} Step ({n + 1}): {last} So the answer is {answer}."
    steps = []
    for i, hop in enumerate(chain):
        before = f"{_plan_lead(i, n)} {hop['sub_question']}" if mode == "count" else _reason_before_hop(i, hop)
        steps.append((_reason_after_hop(chain[i - 1]) if i else "", before))
    done = f" That was search {n} of {n}." if mode == "count" else ""
    verdict = f" {_same_text(same, answer)}" if same else ""
    if comparison and not same and len(_compared(chain)) == 2 and (n >= 4 or options):  # the two years
        direction = _direction(chain, answer, question)
        verdict = f" {_years_side_by_side(chain, direction, question)}" if direction else ""
    if options:
        verdict = f" {_options_text(options)}{verdict}"
    return steps, f"{_reason_after_hop(chain[-1])}{done}{verdict} So the answer is {answer}."


#: oracle reasoning styles (``sft.oracle_plan``): plain sub-questions, a search count, a written decomposition,
#: the decomposition after the kind of answer the question asks for ("The question asks for a country. Plan: ..."),
#: or that with each hop's finding written as a fact about its subject (worlds that record ``fact`` per hop).
PLAN_STYLES = ("none", "count", "decompose", "decompose_explicit", "decompose_facts")


def plan_style(plan: bool | str) -> str:
    """``sft.oracle_plan`` as one of :data:`PLAN_STYLES` (``true`` is the count, for older configs)."""
    style = ("count" if plan else "none") if isinstance(plan, bool) else plan
    if style not in PLAN_STYLES:
        raise ValueError(f"sft.oracle_plan={plan!r}: use one of {', '.join(PLAN_STYLES)} (or true/false)")
    return style


def evidence_sentence(hits: Sequence[Sequence[Hit]], golds: Sequence[str], max_words: int = 40) -> str | None:
    """The first sentence of the documents (in retrieval order) that holds a gold answer as whole words (as
    cover-EM matches), cut to ``max_words`` words around the answer; None when no document holds one."""
    for hit in (h for hs in hits for h in hs):
        text = " ".join(hit.body.split())
        for sentence in re.split(r"(?<=[.!?])\s+", text):
            if not cover_em(sentence, list(golds)):
                continue
            words = sentence.split()
            if len(words) <= max_words:
                return sentence
            low = sentence.lower()
            at = len(sentence[: min((low.find(g.lower()) for g in golds if g.lower() in low), default=0)].split())
            start = max(0, min(at - max_words // 2, len(words) - max_words))
            return " ".join(words[start : start + max_words])
    return None


def oracle_texts(
    protocol: Protocol,
    example: QAExample,
    plan: bool | str = False,
    unchained: str = "error",
    evidence: str | None = None,
    name_options: bool = False,
    years: str | None = None,
) -> list[tuple[str, list[str]]]:
    """The policy's turns as ``(text, queries)``; queries are empty on the final (answer) turn.

    A question without a recorded chain (a real QA file) raises, unless ``unchained="question"``: then the
    trajectory searches the question itself once and answers with the gold, whatever the documents hold. With
    ``unchained="options"`` a choice question ("..., A or B?") searches each option by name instead (in one call
    under a multi-query protocol), as a comparison of the world looks up each entity; other questions as asked.
    ``evidence`` (a sentence of the documents that holds the gold, :func:`evidence_sentence`): the closing step of
    a question searched as asked quotes it before the answer, so the model learns to read the answer off them.
    ``name_options``: the closing step of a recorded choice comparison ("..., A or B?") names the two options (and
    sets their years side by side), as the closing of an unchained one under ``unchained="options"`` does.
    ``years`` (:func:`searchrl.sft.option_years.years_text`, "A 1957, B 1929. 1929 is earlier."): the closing
    step of a choice question looked up option by option sets the years its documents give side by side.

    ``plan`` (see :data:`PLAN_STYLES`): ``count`` makes the first reasoning step say how many searches the question
    needs and every step count them ("Search 2 of 2: ..."); ``decompose`` writes the question's decomposition first
    and follows it step by step (:func:`_steps`). Without a plan, when to stop searching is a comparison of
    the last sub-question with the question, which small models get wrong: they answer the first hop.

    Protocols with multi-query calls (``max_queries > 1``: RAG-R1's multi-query mode, tool_call) search a
    comparison's independent hops in one call; under a ``decompose`` plan the first turn writes the plan and all
    its search steps before that call, and the answer turn records each hop's finding and closes the plan."""
    mode = plan_style(plan)
    if not protocol.searches:  # a protocol without search (the trained baselines'): the short answer alone
        text = protocol.format_answer(example.answers[0])
        if protocol.response_opening.strip():  # a think block the prompt opened is closed before the answer
            text = protocol.format_reasoning(f"So the answer is {example.answers[0]}.") + text
        return [(text, [])]
    chain = example.metadata.get("chain") or []
    style = protocol.format_reasoning
    answer = example.answers[0]
    if not chain:
        if unchained not in ("question", "options"):
            raise ValueError(
                f"question {example.id} has no recorded chain (metadata.chain); oracle needs a synthetic world, "
                "or sft.oracle_unchained=question (one search with the question itself) or options"
            )
        options = choice_options(example.question) if unchained == "options" else []
        # a choice question's answer is one of its options: the closing step says so, tying that answer to the
        # question's form (a bare "So the answer is <name>" taught the model to answer open questions with a
        # name from the question)
        close = f"{_options_text(options)} " if options else ""
        if options and years:
            close += f"{years} "
        if evidence and not options:
            close = f"The documents say: {evidence} "
        final = style(f"{close}So the answer is {answer}.")
        if block := protocol.format_evidence(f"{answer}."):  # R-Search's evidence block
            final += block + "\n"
        final += protocol.format_answer(answer)
        if options and protocol.max_queries > 1:
            reason = style(f"I need to know about {options[0]} and about {options[1]}.")
            queries = [" ".join(o.replace(",", " ").split()) for o in options]  # commas separate a call's queries
            return [(reason + protocol.format_search(queries), queries), (final, [])]
        if options:
            first = style(f"First, I need to know about {options[0]}.") + protocol.format_search([options[0]])
            second = style(f"Next, I need to know about {options[1]}.") + protocol.format_search([options[1]])
            return [(first, [options[0]]), (second, [options[1]]), (final, [])]
        question = example.question.replace(",", " ") if protocol.max_queries > 1 else example.question
        query = " ".join(question.split())
        first = style("I will search for the question as it is asked.") + protocol.format_search([query])
        return [(first, [query]), (final, [])]
    turns: list[tuple[str, list[str]]] = []
    comparison = example.metadata.get("kind") == "comparison"
    named = choice_options(example.question) if name_options and comparison else []
    # a comparison's hops go out in one multi-query call when each asks about an entity the question names
    independent = all((s := _subject(h, example.question)) and s in example.question for h in chain)
    multi = protocol.max_queries > 1 and comparison and independent
    if multi and mode.startswith("decompose"):  # the plan, then all its search steps in one multi-query call
        chain = question_order(chain, example.question)
        steps, final_text = _steps(chain, answer, comparison, mode, example.question, named)
        qs = [h["query"].replace(",", " ") for h in chain][: protocol.max_queries]
        turns.append((style(" ".join(before for _, before in steps)) + protocol.format_search(qs), qs))
        final_text = " ".join([recorded for recorded, _ in steps[1:]] + [final_text])
    elif multi:  # RAG-R1 multi-query: independent hops (comparison) go out in one call
        qs = [h["query"].replace(",", " ") for h in chain][: protocol.max_queries]
        reason = style("I need: " + " and ".join(h["sub_question"] for h in chain))
        turns.append((reason + protocol.format_search(qs), qs))
        facts = " ".join(_reason_after_hop(h) for h in chain)
        same = _same_pair(chain, answer)
        verdict = f" {_same_text(same, answer)}" if same else (f" {_options_text(named)}" if named else "")
        final_text = f"{facts}{verdict} So the answer is {answer}."
    else:
        if comparison and mode.startswith("decompose"):  # the plan follows the question's order
            chain = question_order(chain, example.question)
        steps, final_text = _steps(chain, answer, comparison, mode, example.question, named)
        for hop, (recorded, before) in zip(chain, steps, strict=True):
            recalled = protocol.format_recalled(recorded) if recorded else None
            if recalled is not None:  # the protocol marks what the model already knows (R1-Searcher++)
                text = recalled + style(before)
            else:
                text = style(f"{recorded} {before}".strip())
            turns.append((text + protocol.format_search([hop["query"]]), [hop["query"]]))
    final = style(final_text)
    evidence = protocol.format_evidence(" ".join(f"{h['sub_question']} {h['answer']}." for h in chain))
    if evidence:  # R-Search writes its evidence block before the answer
        final = final + evidence + "\n"
    turns.append((final + protocol.format_answer(answer), []))
    return turns


def round_robin_by_template(examples: Sequence[QAExample]) -> list[QAExample]:
    """``examples`` reordered to take one question of each template (``metadata.template``, else its kind) in
    turn, so the first n cover every question shape about equally. File order is kept within a template, and
    templates come in the order they first appear."""
    groups: dict[str, list[QAExample]] = {}
    for ex in examples:
        groups.setdefault(str(ex.metadata.get("template") or ex.metadata.get("kind") or ""), []).append(ex)
    queues = list(groups.values())
    return [q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q)]


def oracle_trajectories(
    protocol: Protocol,
    examples: Sequence[QAExample],
    retriever: Retriever,
    tokenizer,
    topk: int = 3,
    prompt_style: str = "auto",
    max_obs_tokens: int | None = None,
    plan: bool | str = False,
    unchained: str = "error",
    grounded: bool = False,
    name_options: bool = False,
) -> list[Trajectory]:
    """Build one oracle trajectory per example. All hop queries go to the retriever in one batched call.
    ``max_obs_tokens`` truncates observations exactly as the rollout engine does, so SFT sees what RL will;
    ``plan`` and ``unchained``: see :func:`oracle_texts`. ``grounded``: a question without a recorded chain that
    is searched as asked keeps its trajectory only when the documents hold a gold answer that the question does not
    name, and its closing step quotes the sentence that holds it (answering with that gold); a choice question looked
    up option by option (``unchained="options"``) is kept only when the years its options' documents give decide the
    gold, and its closing sets them side by side (:mod:`searchrl.sft.option_years`); the others are dropped, so
    fewer trajectories than examples may come back. Recorded chains are kept as they are.
    ``name_options``: see :func:`oracle_texts`."""
    protocol.bind_tokenizer(tokenizer, prompt_style)  # tool_call: its replies come from the chat template
    plans = [oracle_texts(protocol, ex, plan, unchained, name_options=name_options) for ex in examples]
    queries = [q for plan in plans for _, qs in plan for q in qs]
    hits = retriever.search(queries, topk) if queries else []
    found: list[list[list[Hit]]] = []  # each example's hits, one list per query
    pos = 0
    for p in plans:
        n = sum(len(qs) for _, qs in p)
        found.append(hits[pos : pos + n])
        pos += n
    if grounded:
        kept = []
        for ex, p, mine in zip(examples, plans, found, strict=True):
            options = choice_options(ex.question) if unchained == "options" else []
            if ex.metadata.get("chain"):
                kept.append((ex, p, mine))
            elif options:  # kept when the years its options' documents give decide the gold
                read = option_years(ex.question, options, mine)
                if read and (decided := years_text(ex.question, options, read, ex.answers)):
                    said, winner = decided
                    ex = replace(ex, answers=[winner, *(a for a in ex.answers if a != winner)])
                    kept.append((ex, oracle_texts(protocol, ex, plan, unchained, years=said), mine))
            elif cover_em(ex.question, ex.answers):  # a gold the question names shows nothing about reading
                continue
            elif sentence := evidence_sentence(mine, ex.answers):
                gold = next(g for g in ex.answers if cover_em(sentence, [g]))
                ex = replace(ex, answers=[gold, *(a for a in ex.answers if a != gold)])
                kept.append((ex, oracle_texts(protocol, ex, plan, unchained, evidence=sentence), mine))
        examples, plans, found = [k[0] for k in kept], [k[1] for k in kept], [k[2] for k in kept]
    out = []
    eos = reply_end_ids(tokenizer, prompt_style)  # the chat template's end of a reply (<|im_end|>), or EOS
    framed = [ex.question for ex in examples]
    if protocol.prompt_documents and examples:  # rag: the documents retrieved with the question, as the engine does
        framed = [protocol.frame_question(q, hs) for q, hs in zip(framed, retriever.search(framed, topk), strict=True)]
    for ex, plan, question, mine in zip(examples, plans, framed, found, strict=True):
        prompt = build_prompt_text(protocol, tokenizer, question, prompt_style)
        traj = Trajectory(
            uid=f"oracle/{ex.id}",
            group_id=f"oracle/{ex.id}",
            question_id=ex.id,
            question=ex.question,
            golds=list(ex.answers),
            prompt_ids=list(tokenizer.encode(prompt, add_special_tokens=False)),
            metadata=dict(ex.metadata),
            protocol=protocol.name,
        )
        for i, (text, qs) in enumerate(plan):
            text = protocol.strip_opening(text) if i == 0 else text  # a <think> the prompt opened is not written
            ids = list(tokenizer.encode(text, add_special_tokens=False))
            last = i == len(plan) - 1
            if last:
                ids += eos  # the model learns to end its reply after its answer
            traj.append(ids, sampled=True, logprobs=[0.0] * len(ids))
            turn = Turn(
                text=text,
                action="answer" if last else "search",
                finish_reason="stop",
                queries=list(qs),
                n_gen_tokens=len(ids),
            )
            if qs:
                these, mine = mine[: len(qs)], mine[len(qs) :]
                turn.hit_ids = [[h.id for h in hs] for hs in these]
                obs_ids, turn.observation = cut_observation(
                    tokenizer,
                    protocol.render_observation(list(qs), these),
                    max_obs_tokens,
                    observation_tail(protocol, tokenizer),
                )
                traj.append(obs_ids, sampled=False)
                turn.n_obs_tokens = len(obs_ids)
            traj.turns.append(turn)
        traj.answer = ex.answers[0]
        traj.stop_reason = "answer"
        out.append(traj)
    return out
