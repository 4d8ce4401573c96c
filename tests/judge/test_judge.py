"""The judge client against scripted endpoints on real local sockets: parsing, retries, deadlines,
requests in flight together, the cache, connection reuse, many callers."""

import socket
import threading

import pytest
from scripted_server import ScriptedServer, Step, reply

from tempering.errors import UserError
from tempering.config import JudgeConfig
from tempering.reward.judge import Judge, JudgeError, worst_case_s
from tempering.verdict import InfrastructureError, JudgeItem

ITEM = JudgeItem("What is 2 + 3?", answer="5", reference="5")


def spec(server_or_url, **kw) -> JudgeConfig:
    url = server_or_url if isinstance(server_or_url, str) else server_or_url.base_url
    return JudgeConfig(**{"base_url": url, "model": "grader", "timeout_s": 5.0, "retries": 2, "backoff_s": 0.01, **kw})


def items(n: int) -> list[JudgeItem]:
    return [JudgeItem(f"task {i}", answer=str(i)) for i in range(n)]


def test_a_good_reply_is_parsed_and_the_request_is_a_chat_completion():
    with ScriptedServer(lambda n, body: reply("The answer agrees with the reference.\nSCORE: 8")) as srv, \
            Judge(spec(srv, temperature=0.0, max_tokens=64)) as judge:
        [result] = judge.judge([ITEM])
    assert result.ok and result.score == pytest.approx(0.8) and result.attempts == 1 and not result.cached
    assert result.reply.endswith("SCORE: 8")
    body = srv.bodies[0]
    assert body["model"] == "grader" and body["temperature"] == 0.0 and body["max_tokens"] == 64
    system, user = body["messages"]
    assert system["role"] == "system" and "SCORE: N" in system["content"]
    assert "<task>\nWhat is 2 + 3?\n</task>" in user["content"] and "<reference>\n5\n</reference>" in user["content"]


@pytest.mark.parametrize("garbled", ["I think it is fine.", "SCORE: 12", "SCORE: 7.5", "SCORE: 3\nSCORE: 9",
                                     "SCORE: 8\nActually no.", ""])
def test_an_unreadable_reply_is_a_judge_error_not_a_score(garbled):
    with ScriptedServer(lambda n, body: reply(garbled)) as srv, Judge(spec(srv)) as judge:
        [result] = judge.judge([ITEM])
        with pytest.raises(InfrastructureError):  # never a training signal
            judge.score(ITEM)
    assert not result.ok and result.score is None
    assert isinstance(result.error, JudgeError) and result.error.kind == "parse" and result.reply == garbled
    assert srv.requests == 2  # a parse failure is not retried, and not cached
    assert judge.stats()["errors/parse"] == 2


def test_a_200_that_is_not_a_chat_completion_is_a_judge_error():
    with ScriptedServer(lambda n, body: Step(raw=b"<html>proxy error</html>")) as srv, Judge(spec(srv)) as judge:
        [result] = judge.judge([ITEM])
    assert result.error.kind == "response"


def test_an_endpoint_failing_twice_with_500_then_answering_succeeds_after_retries():
    script = lambda n, body: Step(500, "overloaded") if n <= 2 else reply("SCORE: 10")  # noqa: E731
    with ScriptedServer(script) as srv, Judge(spec(srv, retries=2)) as judge:
        [result] = judge.judge([ITEM])
        stats = judge.stats()
    assert result.ok and result.score == 1.0 and result.attempts == 3
    assert srv.requests == 3 and stats["retries"] == 2 and stats["requests"] == 3


@pytest.mark.parametrize("status", [500, 503, 429])
def test_an_always_failing_endpoint_is_a_judge_error_after_its_retries(status):
    with ScriptedServer(lambda n, body: Step(status, "down")) as srv, Judge(spec(srv, retries=3)) as judge:
        [result] = judge.judge([ITEM])
    err = result.error
    assert err.kind == "http" and err.status == status and err.attempts == 4 and srv.requests == 4
    assert "down" in str(err)


def test_a_refused_request_is_not_retried():
    with ScriptedServer(lambda n, body: Step(400, "unsupported fields ['x']")) as srv, Judge(spec(srv)) as judge:
        [result] = judge.judge([ITEM])
    assert result.error.kind == "http" and result.error.status == 400 and srv.requests == 1


def test_a_slow_endpoint_is_a_timeout_error_on_every_attempt():
    with ScriptedServer(lambda n, body: Step(delay_s=30, content="SCORE: 9")) as srv, \
            Judge(spec(srv, timeout_s=0.3, retries=1)) as judge:
        [result] = judge.judge([ITEM])
    assert result.error.kind == "timeout" and result.error.attempts == 2 and srv.requests == 2


def test_an_endpoint_that_trickles_its_reply_is_cut_at_the_deadline():
    # Each byte arrives well within the socket timeout; only the request's deadline stops it.
    with ScriptedServer(lambda n, body: Step(trickle_s=0.02, content="SCORE: 9" + " " * 500)) as srv, \
            Judge(spec(srv, timeout_s=0.4, retries=0)) as judge:
        [result] = judge.judge([ITEM])
    assert result.error.kind == "timeout" and srv.requests == 1


def test_an_endpoint_nobody_listens_on_is_a_connection_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        with Judge(spec(f"http://127.0.0.1:{port}/v1", retries=1)) as judge:
            [result] = judge.judge([ITEM])
    assert result.error.kind == "connection" and result.error.attempts == 2


def test_many_items_are_in_flight_together_up_to_max_in_flight():
    with ScriptedServer(lambda n, body: Step(delay_s=0.2, content=f"SCORE: {n % 11}")) as srv, \
            Judge(spec(srv, max_in_flight=4)) as judge:
        results = judge.judge(items(12))
    assert all(r.ok for r in results) and srv.requests == 12
    assert 1 < srv.max_in_flight <= 4


def test_identical_items_share_one_request_and_later_ones_hit_the_cache():
    with ScriptedServer(lambda n, body: Step(delay_s=0.1, content="SCORE: 6")) as srv, Judge(spec(srv)) as judge:
        first = judge.judge([ITEM, ITEM, JudgeItem("other", answer="x")])
        assert srv.requests == 2  # the two identical items: one request
        again = judge.judge([ITEM])
        stats = judge.stats()
    assert srv.requests == 2 and [r.score for r in first + again] == [0.6] * 4
    assert [r.cached for r in first + again] == [False, True, False, True]
    assert stats["cache_hits"] == 2 and stats["cache_misses"] == 2


def test_the_cache_keys_on_the_rubric_and_keeps_at_most_cache_size():
    with ScriptedServer(lambda n, body: reply("SCORE: 4")) as srv:
        with Judge(spec(srv, rubric="outcome", cache_size=1)) as judge:
            judge.judge([ITEM])
            judge.judge([JudgeItem("other")])  # evicts ITEM
            judge.judge([ITEM])
        assert srv.requests == 3
        with Judge(spec(srv, rubric="process")) as other:
            other.judge([ITEM])
        assert srv.requests == 4


def test_sequential_requests_reuse_one_connection_and_survive_a_server_hanging_up():
    with ScriptedServer(lambda n, body: reply("SCORE: 3")) as srv, Judge(spec(srv, max_in_flight=1)) as judge:
        results = judge.judge(items(5))
        assert len(srv.connections) == 1
    assert all(r.ok and r.attempts == 1 for r in results)
    # a server that closes kept-alive connections between requests without saying so
    with ScriptedServer(lambda n, body: Step(content="SCORE: 3", hang_up=True)) as srv, \
            Judge(spec(srv, max_in_flight=1, retries=0)) as judge:
        results = judge.judge(items(4))
        stats = judge.stats()
    assert all(r.ok for r in results) and srv.requests == 4 and stats["requests"] == 4


def test_many_callers_at_once_from_threads():
    with ScriptedServer(lambda n, body: Step(delay_s=0.02, content="SCORE: 7")) as srv, \
            Judge(spec(srv, max_in_flight=4)) as judge:
        out: dict[int, list] = {}

        def caller(k: int) -> None:
            out[k] = judge.judge(items(10))  # the same 10 items from every thread

        threads = [threading.Thread(target=caller, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stats = judge.stats()
    assert all(r.ok and r.score == 0.7 for rs in out.values() for r in rs)
    assert srv.requests == 10 and stats["cache_misses"] == 10 and stats["cache_hits"] == 50


def test_a_closed_judge_fails_what_it_had_not_sent():
    with ScriptedServer(lambda n, body: Step(delay_s=0.3, content="SCORE: 1")) as srv:
        judge = Judge(spec(srv, max_in_flight=1))
        futures = [judge.submit(i) for i in items(3)]
        judge.close()
        results = [f.result(timeout=10) for f in futures]
    assert any(r.error is not None and r.error.kind == "closed" for r in results)


@pytest.mark.parametrize("field, value, words", [
    ("base_url", "localhost:8000", r"http\(s\) URL"), ("timeout_s", 0, "timeout_s"), ("retries", -1, "retries"),
    ("max_in_flight", 0, "max_in_flight"), ("rubric", "outcom", "no such rubric"), ("rubric", "", "rubric"),
])
def test_spec_errors_name_the_field(field, value, words):
    with pytest.raises(UserError, match=words):
        Judge(JudgeConfig(**{"base_url": "http://127.0.0.1:1/v1", "model": "m", field: value})).close()


def test_worst_case_bounds_every_attempt_and_backoff():
    s = JudgeConfig("http://127.0.0.1:1/v1", "m", timeout_s=10, retries=3, backoff_s=1.0)
    assert worst_case_s(s) == 4 * 10 + 1 + 2 + 4


def test_api_key_comes_from_the_environment(monkeypatch):
    with ScriptedServer(lambda n, body: reply("SCORE: 2")) as srv:
        with pytest.raises(UserError, match="JUDGE_KEY_FOR_TEST"):
            Judge(spec(srv, api_key_env="JUDGE_KEY_FOR_TEST"))
        monkeypatch.setenv("JUDGE_KEY_FOR_TEST", "sk-test")
        with Judge(spec(srv, api_key_env="JUDGE_KEY_FOR_TEST")) as judge:
            assert judge.score(ITEM) == pytest.approx(0.2)
    assert srv.headers[-1]["Authorization"] == "Bearer sk-test"
