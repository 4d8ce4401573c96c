"""The finance/* domains end to end: every family's reference, replayed through an episode with
the compact tool format (tools read the PDF for real), scores 1 through the reward service; an
empty answer, "0", random text and other wrong answers score 0. Tasks carry their report by
reference only; the tools fail as observations; SFT replays references."""

from __future__ import annotations

import dataclasses
import json
import random
import string

import pytest

from tempering.agent.format import tool_format
from tempering.agent.tools import execute, tool_schemas
from tempering.config import RewardConfig
from tempering.records import ToolCall
from tempering.reward import RewardService, Submission
from tempering.rollout.environment import Environments
from tempering.rollout.group_key import GroupKey
from tempering.rollout.episode import Episode, replay
from tempering.tasks import domains, get_domain
from tempering.tasks.finance import DOMAINS
from tempering.tasks.finance.domain import decode_ref, make_task, question, VARIANTS
from tempering.tasks.finance.layout import pdf_pages
from tempering.tasks.finance.report import Spec
from tempering.tasks.finance.questions import ABSENT, FAMILIES
from tempering.tokenizer import char_tokenizer
from tempering.trainer.sft import sft_batch

TOK = char_tokenizer(string.printable)
FMT = tool_format("compact", TOK)
NAMES = sorted(d.name for d in DOMAINS)


@pytest.fixture(scope="module")
def reward():
    service = RewardService(RewardConfig(workers=2), TOK)
    yield service
    service.close()


def tasks_of(name: str) -> list:
    """Two tasks of a domain drawn as the pool draws them; a long domain's are made on one shared
    long report (rendering a 100-page PDF per task would be slow here)."""
    domain = get_domain(name)
    if name.endswith("-long"):
        family = name.split("/")[1].removesuffix("-long")
        spec = Spec(0, "long", 7 if family == "inconsistency" else 0)
        _, tools, budget = VARIANTS["-long"]
        return [make_task(name, family, spec, q, tools, budget) for q in (1, 2)]
    rng = random.Random(name)
    return [domain.generate(rng) for _ in range(2)]


def play(task, turns):
    """Replay `turns` as the policy (compact tool calls run on the episode's document)."""
    hosts = Environments(None).open(task, 1, GroupKey("test")) or [None]
    episode = Episode(task, 0, TOK.encode_prompt(task.prompt), task.budget.max_tokens, 1 << 30, FMT.parse,
                      FMT.renderer, hosts[0])
    replay(episode, turns, TOK)
    return episode.trajectory(TOK.decode(episode.token_ids)), hosts[0]


def score(reward, task, turns):
    trajectory, host = play(task, turns)
    (r,) = reward.score([Submission(task, trajectory, host)])
    assert not r.failed, r.reason
    return r, trajectory


def test_every_family_is_registered_in_each_variant():
    assert NAMES == sorted(f"finance/{f}{v}" for f in FAMILIES for v in VARIANTS)
    known = domains()
    for d in DOMAINS:
        assert known[d.name] is d and d.family == "finance" and not d.heavy and not d.sandbox
        tools = not d.name.endswith("-inline")
        assert (set(d.tools) == {"list_pages", "read_page", "search", "calculate"}) == tools
        assert (d.open_host is not None) == tools


@pytest.mark.parametrize("name", NAMES)
def test_the_reference_scores_1_and_junk_scores_0(name, reward):
    for task in tasks_of(name):
        q = question(task.ref)
        r, trajectory = score(reward, task, task.reference_turns)
        assert r.outcome == 1.0 and r.components["partial"] == 1.0, (task.reference_turns, r.reason)
        assert trajectory.finish_reason == "stop" and TOK.decode(trajectory.answer_ids) == task.answer == q.answer
        calls = trajectory.tool_calls
        assert not [c for c in calls if c.error] and len(calls) == len(task.reference_turns) - 1
        if task.tools:
            n_pages = len(pdf_pages(decode_ref(task.ref)[0]))
            assert task.reference_turns[0] == "$list_pages" and calls[0].output.startswith(f"{n_pages} pages")
            for call in calls:
                if call.name == "search":  # an unanswerable question: the report has no such line
                    assert call.output.startswith("no matches")
        wrong = ["", "0", " ".join(random.Random(1).choice(string.ascii_lowercase) * 5 for _ in range(8)),
                 "42" if q.kind == "absent" else ABSENT]
        if q.kind in ("money", "percent", "ratio") and q.value:
            wrong.append(task.answer.replace("-", "") if task.answer.startswith("-") else "-" + task.answer)
        for answer in wrong:
            r, _ = score(reward, task, [*task.reference_turns[:-1], answer])
            assert r.outcome == 0.0, (answer, r.reason)
        # an answer cut off by the budget counts for nothing, even when its text is right
        trajectory, host = play(task, task.reference_turns)
        cut = dataclasses.replace(trajectory, finish_reason="length")
        (r,) = reward.score([Submission(task, cut, host)])
        assert r.outcome == 0.0


def test_tasks_carry_the_report_by_reference_only():
    for name in NAMES:
        for task in tasks_of(name)[:1]:
            ref = json.loads(task.ref)
            assert set(ref) == {"v", "seed", "size", "tamper", "family", "q"} and len(task.ref) < 120
            if task.tools:
                assert len(task.prompt) < 2000 and task.environment is None
                assert not any("Total current assets" in m.content for m in task.messages)
            else:
                assert "<report>" in task.prompt and "Total current assets" in task.prompt
    task = tasks_of("finance/extraction")[0]
    assert get_domain("finance/extraction").make(random.Random("finance/extraction")) == task  # seeded


def test_tools_answer_json_calls_and_fail_as_observations():
    task = tasks_of("finance/extraction")[0]
    doc = Environments(None).open(task, 1, GroupKey("test"))[0]
    pages = pdf_pages(decode_ref(task.ref)[0])

    def call(name, **args):
        return execute(ToolCall(name, args), task, doc, 0)

    assert call("read_page", page="2").output == pages[1]  # hermes-style named arguments
    assert call("read_page", page=" page 1 ").output == pages[0]
    for args, why in ((dict(page="0"), "there is no page 0"), (dict(page="two"), "needs a page number"),
                      (dict(page=str(len(pages) + 1)), "there is no page")):
        out = call("read_page", **args)
        assert out.error_kind == "tool" and why in out.error
    assert call("read_page").error_kind == "bad_arguments"
    hits = call("search", query="total   ASSETS").output.splitlines()
    assert hits and all(h.startswith("page ") and "total assets" in h.lower() for h in hits)
    assert call("search", query=" ").error_kind == "tool"
    assert call("calculate", expression="(1,200 - 1,000) / 1,000 * 100").output == "20"
    bad = call("calculate", expression="__import__('os').getcwd()")
    assert bad.error_kind == "tool" and "not allowed" in bad.error
    assert doc.read == [2, 1] and doc.calls == 7  # the calls that read the document (not calculate)
    schemas = {s["function"]["name"]: s["function"]["parameters"]["required"] for s in tool_schemas(task)}
    assert schemas == {"list_pages": [], "read_page": ["page"], "search": ["query"], "calculate": ["expression"]}


def test_sft_replays_the_references_with_their_tool_results():
    tasks = [t for name in ("finance/ratios", "finance/unanswerable", "finance/growth-inline") for t in
             tasks_of(name)[:1]]
    batch = sft_batch(TOK, tasks, FMT)
    assert batch.input_ids.shape[0] == 3
    # the model's turns carry loss; the pages the tools returned do not
    for row, task in enumerate(tasks):
        model_tokens = sum(len(TOK.encode(turn)) + 1 for turn in task.reference_turns)
        assert int(batch.loss_mask[row].sum()) == model_tokens


def test_sft_writes_the_references_calls_in_the_runs_tool_format(tmp_path):
    """A chat model's run (hermes calls, a ChatML template that does not print tools): the
    reference's compact calls (`$read_page 1`) are replayed as <tool_call> JSON with the tool's
    parameter names, parse back to the same calls, and their results follow as tool turns."""
    from tokenizer_builders import QWEN2_CONFIG, qwen2_style, write_folder

    from tempering.agent.parsers import compact, hermes
    from tempering.agent.tools import bind_arguments, tools_for
    from tempering.tokenizer import load_tokenizer

    tok = load_tokenizer(write_folder(tmp_path / "tok", qwen2_style(), QWEN2_CONFIG))
    fmt = tool_format("auto", tok)
    task = tasks_of("finance/ratios")[0]
    turns = [fmt.in_format(turn, task) for turn in task.reference_turns]
    assert fmt.name == "hermes" and len(turns) == len(task.reference_turns) >= 2
    for ref, written in zip(task.reference_turns[:-1], turns):
        (want,), (got,) = compact(ref), hermes(written)
        assert (got.name, dict(got.arguments)) == (want.name, bind_arguments(tools_for(task)[want.name], want.arguments))
    assert turns[-1] == task.reference_turns[-1]  # the final answer calls nothing
    batch = sft_batch(tok, [task], fmt)
    text = tok.decode(batch.input_ids[0].tolist(), skip_special_tokens=False)
    assert "<tools>" in text and text.count("<|im_start|>tool\n") == len(turns) - 1
    assert int(batch.loss_mask[0].sum()) == sum(len(tok.encode(turn)) + 1 for turn in turns)
