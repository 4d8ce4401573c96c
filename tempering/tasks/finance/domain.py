"""The `finance/*` domains: questions about generated annual reports, read with tools.

`finance/<family>` (extraction, ratios, growth, multistep, inconsistency, unanswerable,
conclusion): a brief, short or medium report (2 to about 12 pages) read with the tools
`list_pages`, `read_page`, `search` and `calculate`; `finance/<family>-long`: the same on a long
report (about 100 pages, 100k+ tokens); `finance/<family>-inline`: a brief or short report in the
prompt as markdown, no tools, one turn.

A task carries its report and question by reference: `Task.ref` is a small JSON object (the
report's seed, size and altered figure, the question's family and seed) from which any process
rebuilds the report (cached per process), its PDF (for the tools) and the question with its
answer; the document is never in the task (except in the prompt of the inline variants). The
answer is the episode's last assistant turn (one that calls no tool); `Task.answer` holds the
reference answer for people to read, the verifier recomputes it from the ref. The reference
(`Task.reference`) is a sequence of turns in the compact tool format that lists the pages,
reads the pages holding the figures it needs (searches, for an unanswerable question),
calculates, and answers.

The `conclusion` domains are also graded by reward models and judges (`tempering.reward.graders`):
they carry `RUBRIC` (their criteria for judges whose rubric is "domain") and `grade_item`, which
shows a grader the question without the report, the final answer, and the reference conclusion
with the report's figures it rests on. The other families' answers are exact figures or labels:
their verifier is the whole grade.
"""

from __future__ import annotations

import dataclasses
import json
import random

from tempering.records import Budget, Message, Task, Trajectory
from tempering.verdict import JudgeItem, Verdict, VerifierContext, outcome_item
from tempering.tasks.answers import read_answer
from tempering.tasks.domain import Domain
from tempering.tasks.finance import conclusion, questions
from tempering.tasks.finance.formats import fmt_signed
from tempering.tasks.finance.layout import layout, markdown
from tempering.tasks.finance.model import memo, report
from tempering.tasks.finance.questions import ABSENT, FAMILIES, Question
from tempering.tasks.finance.report import Spec
from tempering.tasks.finance.tools import TOOLS, Document

TOOL_NAMES = tuple(TOOLS)
REF_VERSION = 1

SYSTEM = ("You answer questions about a company's annual report, a PDF that you read with tools: list_pages "
          "(the pages and what each holds), read_page (one page's text), search (lines that contain a phrase) and "
          "calculate (arithmetic). When you know the answer, reply with the answer alone, without calling a tool. "
          f"If the report does not contain what the question asks for, reply exactly: {ABSENT}")

# variant -> (sizes drawn and their weights, tools, budget)
VARIANTS = {
    "": ((("brief", "short", "medium"), (1, 2, 2)), True, Budget(max_turns=10, max_tokens=2048, wall_s=300.0)),
    "-long": ((("long",), (1,)), True, Budget(max_turns=16, max_tokens=4096, wall_s=600.0)),
    "-inline": ((("brief", "short"), (1, 1)), False, Budget(max_turns=1, max_tokens=512, wall_s=120.0)),
}


def encode_ref(spec: Spec, family: str, qseed: int) -> str:
    return json.dumps({"v": REF_VERSION, "seed": spec.seed, "size": spec.size, "tamper": spec.tamper,
                       "family": family, "q": qseed}, sort_keys=True, separators=(",", ":"))


def decode_ref(ref: str) -> tuple[Spec, str, int]:
    d = json.loads(ref)
    if d.get("v") != REF_VERSION:
        raise ValueError(f"finance task reference of version {d.get('v')!r}; this code reads version {REF_VERSION}")
    return Spec(int(d["seed"]), d["size"], int(d["tamper"])), d["family"], int(d["q"])


@memo(256)
def question(ref: str) -> Question:
    spec, family, qseed = decode_ref(ref)
    return questions.build(report(spec), family, qseed)


def reference_turns(ref: str) -> tuple[str, ...]:
    """The oracle's turns: list the pages, read those holding the figures (or search, when the
    report has no answer), calculate, answer."""
    spec, _, _ = decode_ref(ref)
    q = question(ref)
    where = layout(spec).where
    turns = ["$list_pages"]
    pages: list[int] = []
    for key in q.cells:
        if where[key] not in pages:
            pages.append(where[key])
    turns += [f"$read_page {p}" for p in pages]
    turns += [f"$search {s}" for s in q.searches]
    results: list[str] = []
    for step in q.steps:
        expression = step.format(*results)
        turns.append(f"$calculate {expression}")
        results.append(questions.evaluate(expression))
    return (*turns, q.answer)


def prompt_text(spec: Spec, q: Question, inline: bool) -> tuple[str, str]:
    """(the system text, the user text) of a task."""
    rep = report(spec)
    ask = f"Question: {q.text} {q.instructions(rep.unit_phrase)}"
    if not inline:
        user = f"The annual report of {rep.company} for fiscal {rep.years[-1]}.\n{ask}"
        return SYSTEM, user
    system = ("You answer questions about a company's annual report, given below in markdown. Reply with the "
              f"answer alone. If the report does not contain what the question asks for, reply exactly: {ABSENT}")
    return system, f"<report>\n{markdown(spec)}</report>\n\n{ask}"


def make_task(domain: str, family: str, spec: Spec, qseed: int, tools: bool, budget: Budget) -> Task:
    ref = encode_ref(spec, family, qseed)
    q = question(ref)
    system, user = prompt_text(spec, q, inline=not tools)
    return Task(id="", domain=domain, prompt=f"{system}\n\n{user}", answer=q.answer, ref=ref,
                messages=(Message("system", system), Message("user", user)),
                tools=TOOL_NAMES if tools else (), budget=budget,
                reference=reference_turns(ref) if tools else q.answer)


def verify(task: Task, sample: Trajectory, ctx: VerifierContext) -> Verdict:
    """The last assistant turn against the question's answer, recomputed from the task's ref
    (the report's model only: no PDF is rendered or parsed here)."""
    q = question(task.ref)
    answer = read_answer(sample, ctx)
    ok, partial, reason = questions.judge(q, answer.text, report(decode_ref(task.ref)[0]).scale)
    if answer.problem:
        return Verdict({"outcome": 0.0, "partial": partial}, answer.problem)
    return Verdict({"outcome": float(ok), "partial": partial}, reason)


def grade_item(task: Task, sample: Trajectory, ctx: VerifierContext) -> JudgeItem:
    """What a grader sees of a conclusion: the question as the tool variants ask it (an inline
    task's report would be most of the text; the reference carries the figures that matter), the
    sample's final answer, and the reference conclusion with the report's figures it rests on."""
    spec = decode_ref(task.ref)[0]
    rep, q = report(spec), question(task.ref)
    figures = "; ".join(f"{rep.label(k)}, {'end of ' if rep.tables[k[0]].when == 'end' else ''}fiscal {k[2]}: "
                        f"{fmt_signed(rep.cells[k])}" for k in q.cells)
    reference = f"{q.answer}\nThe report's figures (in {rep.unit_phrase}): {figures}."
    item = outcome_item(task, sample, ctx.tokenizer, reference)
    return dataclasses.replace(item, prompt=prompt_text(spec, q, inline=False)[1])


def open_host(task: Task) -> Document:
    """The episode's document: the report's PDF as pypdf reads it (rendered once per process)."""
    return Document.open(decode_ref(task.ref)[0])


def _maker(name: str, family: str, variant: str):
    (sizes, weights), tools, budget = VARIANTS[variant]

    def make(rng: random.Random) -> Task:
        size = rng.choices(sizes, weights)[0]
        spec = Spec(rng.randrange(1 << 31), size, 1 + rng.randrange(1 << 20) if family == "inconsistency" else 0)
        return make_task(name, family, spec, rng.randrange(1 << 31), tools, budget)

    return make


_DESCRIPTIONS = {
    "extraction": "one figure of a table", "ratios": "a financial ratio (its definition given)",
    "growth": "a year-over-year change in percent", "multistep": "a figure computed in several steps",
    "inconsistency": "the line item of the one altered figure that breaks the report's identities",
    "unanswerable": f"a question the report cannot answer (answer: {ABSENT})",
    "conclusion": "a one- or two-sentence conclusion on how revenue, a margin or debt moved (direction and size)"}
_VARIANT_WORDS = {"": "2-12 page report read with tools", "-long": "100k+ token report read with tools",
                  "-inline": "short report in the prompt, no tools"}


def _domains() -> list[Domain]:
    out = []
    for family in FAMILIES:
        for variant, (_, tools, _) in VARIANTS.items():
            name = f"finance/{family}{variant}"
            graded = family == "conclusion"  # the one family with prose for a judge to grade
            out.append(Domain(name, f"annual reports: {_DESCRIPTIONS[family]} ({_VARIANT_WORDS[variant]})", verify,
                              make=_maker(name, family, variant), tools=TOOLS if tools else {},
                              open_host=open_host if tools else None, rubric=conclusion.RUBRIC if graded else "",
                              grade_item=grade_item if graded else None))
    return out


DOMAINS = _domains()
