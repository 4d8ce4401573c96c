"""Judges as reward components in the reward service, against scripted endpoints on real local
sockets: components named `judge_<name>` beside the verifier's, weighted per domain, normalised
within a group; a failing endpoint or an unreadable reply fails the sample, never scores it."""

import re
import string

import pytest
from scripted_server import ScriptedServer, Step, reply

from tempering.config import ConfigError, JudgeConfig, RewardConfig, load_config
from tempering.errors import UserError
from tempering.records import Budget, Task, Trajectory
from tempering.reward import RewardService, Submission
from tempering.reward.graders import check_scorers, within_groups
from tempering.verdict import InfrastructureError
from tempering.tokenizer import char_tokenizer

TOKENIZER = char_tokenizer(string.printable)


def task(tid="t1", answer="1247", domain="sorting"):
    return Task(id=tid, domain=domain, prompt="sort 4721=", answer=answer, budget=Budget(time_limit_s=2))


def sample(text):
    ids = TOKENIZER.encode(text) + [TOKENIZER.eos_id]
    return Trajectory(task_id="t1", domain="sorting", sample_index=0, prompt_ids=[5], token_ids=ids,
                      logprobs=[0.0] * len(ids), loss_mask=[1] * len(ids), versions=[0] * len(ids),
                      text=TOKENIZER.decode(ids), finish_reason="stop")


def reward_cfg(url, rubric="outcome", normalize="none", weights=None, scorers=None):
    judge = JudgeConfig(base_url=url, model="grader", rubric=rubric, timeout_s=2.0, retries=1, backoff_s=0.01,
                        normalize=normalize)
    return RewardConfig(judges={"q": judge}, scorers=scorers or {"sorting": ["judge_q"]},
                        domain_weights={"sorting": weights or {"outcome": 1.0, "partial": 0.0, "judge_q": 0.5}})


def answer_of(body) -> str:
    return re.search(r"<answer>\n(.*?)\n</answer>", body["messages"][1]["content"], re.S).group(1)


def by_answer(n, body):
    """Scores the answer by its first digit: '1247' -> SCORE: 1."""
    return reply(f"SCORE: {answer_of(body)[0]}")


def test_judge_component_is_weighted_beside_the_verifier():
    with ScriptedServer(by_answer) as srv:
        svc = RewardService(reward_cfg(srv.base_url), TOKENIZER)
        try:
            right, wrong = svc.score([Submission(task(), sample("1247")), Submission(task(), sample("7421"))])
        finally:
            svc.close()
    assert right.components == {"outcome": 1.0, "partial": 1.0, "judge_q": pytest.approx(0.1)}
    assert right.total == pytest.approx(1.0 + 0.5 * 0.1)
    assert wrong.components["outcome"] == 0.0 and wrong.components["judge_q"] == pytest.approx(0.7)
    assert wrong.total == pytest.approx(0.5 * 0.7)
    # the judge saw the task as the model did, the reference answer and the sample's answer
    assert "<task>\nsort 4721=\n</task>" in srv.bodies[0]["messages"][1]["content"]
    assert "<reference>\n1247\n</reference>" in srv.bodies[0]["messages"][1]["content"]
    assert svc.take_seconds()["judge_q"] > 0


def test_domains_without_a_scorer_get_no_judge_call():
    with ScriptedServer(by_answer) as srv:
        svc = RewardService(reward_cfg(srv.base_url, scorers={"strings": ["judge_q"]}), TOKENIZER)
        try:
            (r,) = svc.score([Submission(task(), sample("1247"))])
        finally:
            svc.close()
    assert srv.requests == 0 and set(r.components) == {"outcome", "partial"} and r.total == 1.0


@pytest.mark.parametrize("step, words", [(Step(500, "overloaded"), "HTTP 500"), (reply("Looks right to me."), "no SCORE"),
                                         (Step(delay_s=5.0), "timeout")])
def test_a_judge_that_cannot_grade_fails_the_sample(step, words):
    with ScriptedServer(lambda n, body: step) as srv:
        svc = RewardService(reward_cfg(srv.base_url), TOKENIZER)
        try:
            (r,) = svc.score([Submission(task(), sample("1247"))])
        finally:
            svc.close()
    assert r.failed and r.total == 0.0 and "judge_q" in r.reason and words in r.reason


def test_group_normalisation_z_scores_within_each_task():
    with ScriptedServer(by_answer) as srv:
        svc = RewardService(reward_cfg(srv.base_url, normalize="group", weights={"outcome": 0.0, "partial": 0.0, "judge_q": 1.0}), TOKENIZER)
        try:
            items = [Submission(task("a"), sample(t)) for t in ("1111", "3333")] + \
                    [Submission(task("b"), sample(t)) for t in ("5555", "5555", "9999")]
            rewards = svc.score(items)
        finally:
            svc.close()
    values = [r.components["judge_q"] for r in rewards]
    assert [r.components["judge_q_raw"] for r in rewards] == pytest.approx([0.1, 0.3, 0.5, 0.5, 0.9])
    assert [r.total for r in rewards] == pytest.approx(values)  # the raw score is logged, not rewarded
    assert values[:2] == pytest.approx([-1.0, 1.0])  # 0.1 and 0.3 in a group of two
    assert values[2:] == pytest.approx([-2 ** -0.5, -2 ** -0.5, 2 ** 0.5])  # 0.5, 0.5, 0.9


def test_within_groups_leaves_failures_out_and_singletons_at_zero():
    tasks = [task("a"), task("a"), task("a"), task("b")]
    err = InfrastructureError("down")
    assert within_groups(tasks, [0.2, err, 0.6, 0.9]) == [pytest.approx(-1.0), err, pytest.approx(1.0), 0.0]


def test_domain_rubric_grades_by_the_domains_criteria_and_is_checked_at_start():
    with ScriptedServer(by_answer) as srv:
        cfg = reward_cfg(srv.base_url, rubric="domain")
        with pytest.raises(UserError, match="domain sorting .* has no rubric"):
            check_scorers(cfg, ["sorting"])
        svc = RewardService(cfg, TOKENIZER)
        try:
            (r,) = svc.score([Submission(task(), sample("1247"))])
        finally:
            svc.close()
    assert r.failed and "no rubric of its own" in r.reason and srv.requests == 0


def test_scorers_must_name_configured_graders_and_domains():
    with pytest.raises(ConfigError, match="judge_nope"):
        load_config(None, ['--reward.scorers={sorting=["judge_nope"]}'])
    cfg = load_config(None, ['--reward.judges.q={base_url="http://127.0.0.1:1/v1", model="m"}',
                             '--reward.scorers={"no-such-*"=["judge_q"]}'])
    with pytest.raises(UserError, match="reward.scorers.no-such-"):
        check_scorers(cfg.reward, ["sorting"])
    with pytest.raises(ConfigError, match="reward.models.path"):
        load_config(None, ['--reward.models.q={max_wait_ms=1}'])
    with pytest.raises(UserError, match="not a model folder"):
        check_scorers(load_config(None, ['--reward.models.q={path="/nonexistent/rm"}',
                                         '--reward.scorers={sorting=["rm_q"]}']).reward, ["sorting"])


def test_finance_conclusions_get_the_judges_score_beside_their_exact_check():
    """The domain's rubric and grade item reach the judge; its score sits beside the exact check."""
    import random

    from tempering.agent.format import tool_format
    from tempering.rollout.episode import Episode, replay
    from tempering.tasks import get_domain
    from tempering.tasks.finance.conclusion import RUBRIC

    t = get_domain("finance/conclusion-inline").make(random.Random(3))
    fmt = tool_format("compact", TOKENIZER)
    episode = Episode(t, 0, TOKENIZER.encode_prompt(t.prompt), 4096, 1 << 30, fmt.parse, fmt.renderer, None)
    replay(episode, [t.answer], TOKENIZER)
    right = episode.trajectory(TOKENIZER.decode(episode.token_ids))
    with ScriptedServer(lambda n, body: reply("Supported by the figures.\nSCORE: 9")) as srv:
        cfg = RewardConfig(judges={"intent": JudgeConfig(base_url=srv.base_url, model="grader", rubric="domain",
                                                         timeout_s=5.0)},
                           scorers={"finance/conclusion*": ["judge_intent"]},
                           domain_weights={"finance/conclusion-inline": {"outcome": 1.0, "judge_intent": 0.25}})
        check_scorers(cfg, ["finance/conclusion-inline"])
        svc = RewardService(cfg, TOKENIZER)
        try:
            (r,) = svc.score([Submission(t, right)])
        finally:
            svc.close()
    assert not r.failed, r.reason
    assert r.components["outcome"] == 1.0 and r.components["judge_intent"] == pytest.approx(0.9)
    user = srv.bodies[0]["messages"][1]["content"]
    assert RUBRIC in user and f"<answer>\n{t.answer}\n</answer>" in user and "<reference>" in user
