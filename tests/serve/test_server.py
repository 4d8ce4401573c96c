"""`tempering serve` over a real socket: completions, chat, streaming, n > 1, 4xx errors, deadlines, engine faults."""

import http.client
import json
import queue
import threading

import pytest

from tempering.config import ServeConfig
from tempering.engine import LLM, CompletionOutput, RequestOutput, SamplingParams
from tempering.serve.engine_loop import EngineLoop
from tempering.serve.server import Server
from tempering.serve.tenants import Tenant
from tempering.models import Arch, build_model
from tempering.tokenizer import char_tokenizer


ANYONE = Tenant("default")


def tiny_engine(tokenizer=None, **options) -> LLM:
    tokenizer = tokenizer or char_tokenizer("abcdefghijklmnopqrstuvwxyz :\n")
    arch = Arch(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=1)
    return LLM(build_model(arch, seed=0), tokenizer, max_seq_len=128, **options)


@pytest.fixture(scope="module")
def server():
    srv = Server(tiny_engine(max_batch_size=16), port=0, model_name="tiny").start()
    yield srv
    srv.close()


def call(server, method, path, body=None, raw=None):
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=30)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    payload = resp.read().decode()
    conn.close()
    return resp.status, resp.getheader("Content-Type"), payload


def test_health_and_models(server):
    assert call(server, "GET", "/health")[0] == 200
    status, _, body = call(server, "GET", "/v1/models")
    assert status == 200 and json.loads(body)["data"][0]["id"] == "tiny"


def test_kv_usage_reports_the_prefix_cache_a_request_left():
    srv = Server(tiny_engine(block_size=4, kv_blocks=32), port=0, model_name="tiny").start()
    try:
        before = json.loads(call(srv, "GET", "/kv_usage")[2])
        assert before["running_bytes"] == before["cached_bytes"] == before["swapped_bytes"] == 0
        status, _, _ = call(srv, "POST", "/v1/completions", {"prompt": "abcdefghijkl", "max_tokens": 3,
                                                              "ignore_eos": True})
        status, kind, body = call(srv, "GET", "/kv_usage")
        after = json.loads(body)
        assert status == 200 and kind == "application/json"
        # the BOS and 12 prompt characters and 2 computed outputs: 3 full blocks stay cached
        assert after["cached_bytes"] == 3 * after["block_bytes"] and after["running_bytes"] == 0
        assert after["cached_bytes"] + after["free_bytes"] == 32 * after["block_bytes"]
        assert after["device"] == "cpu" and after["resident_bytes"] > 0 and after["file_bytes"] == 0
    finally:
        srv.close()


def test_completion_with_n_samples_and_several_prompts(server):
    status, _, body = call(server, "POST", "/v1/completions", {
        "model": "tiny", "prompt": ["ab", "cd"], "max_tokens": 5, "n": 3, "temperature": 1.0, "seed": 1,
        "ignore_eos": True, "logprobs": 1})
    out = json.loads(body)
    assert status == 200 and out["object"] == "text_completion"
    assert sorted(c["index"] for c in out["choices"]) == list(range(6))
    assert all(c["finish_reason"] == "length" and len(c["logprobs"]["token_logprobs"]) == 5 for c in out["choices"])
    assert out["usage"] == {"prompt_tokens": 4, "completion_tokens": 30, "total_tokens": 34}


def test_chat_completion_and_greedy_determinism(server):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "temperature": 0,
            "ignore_eos": True}
    first = json.loads(call(server, "POST", "/v1/chat/completions", body)[2])
    second = json.loads(call(server, "POST", "/v1/chat/completions", body)[2])
    msg = first["choices"][0]["message"]
    assert first["object"] == "chat.completion" and msg["role"] == "assistant"
    assert msg["content"] == second["choices"][0]["message"]["content"]


def test_streaming_matches_the_non_streamed_text(server):
    body = {"prompt": "abc", "max_tokens": 12, "temperature": 0, "ignore_eos": True}
    whole = json.loads(call(server, "POST", "/v1/completions", body)[2])["choices"][0]["text"]
    status, ctype, raw = call(server, "POST", "/v1/completions", {**body, "stream": True})
    assert status == 200 and ctype == "text/event-stream"
    events = [line[len("data: "):] for line in raw.split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_streamed_chat_with_n_2_cuts_stop_strings_like_the_non_streamed_one(server):
    body = {"messages": [{"role": "user", "content": "go"}], "max_tokens": 20, "n": 2, "stream": True,
            "temperature": 1.0, "seed": 6, "stop": ["q"]}
    status, _, raw = call(server, "POST", "/v1/chat/completions", body)
    chunks = [json.loads(line[6:]) for line in raw.split("\n") if line.startswith("data: {")]
    by_index = {}
    for c in chunks:
        ch = c["choices"][0]
        by_index.setdefault(ch["index"], []).append(ch)
    whole = json.loads(call(server, "POST", "/v1/chat/completions", {**body, "stream": False})[2])["choices"]
    assert status == 200 and sorted(by_index) == [0, 1]
    for c in whole:
        parts = by_index[c["index"]]
        assert parts[0]["delta"].get("role") == "assistant"
        assert parts[-1]["finish_reason"] == c["finish_reason"] == "stop"  # this seed meets a "q"
        assert "".join(p["delta"].get("content", "") for p in parts) == c["message"]["content"]
        assert "q" not in c["message"]["content"]


@pytest.mark.parametrize("path, body, raw, status, words", [
    ("/v1/completions", None, b"{not json", 400, "not valid JSON"),
    ("/v1/completions", {"prompt": ""}, None, 400, "prompt"),
    ("/v1/completions", {"prompt": "ab", "max_tokens": 1000}, None, 400, "max_seq_len"),
    ("/v1/completions", {"prompt": "ab", "temperature": -1}, None, 400, "temperature"),
    ("/v1/completions", {"prompt": "ab", "n": "two"}, None, 400, "n must be an integer"),
    ("/v1/completions", {"prompt": [1, 99999]}, None, 400, "token ids"),
    ("/v1/completions", {"prompt": "ab", "best_of": 2}, None, 400, "unsupported fields"),
    ("/v1/completions", {"prompt": ["ab", "cd"], "n": 200, "max_tokens": 2}, None, 400, "max_request_sequences"),
    ("/v1/chat/completions", {"messages": []}, None, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user"}]}, None, 400, "content"),
    ("/v1/embeddings", {"input": "x"}, None, 404, "no route"),
])
def test_bad_requests_get_4xx_json_errors(server, path, body, raw, status, words):
    got, ctype, payload = call(server, "POST", path, body, raw)
    err = json.loads(payload)["error"]
    assert got == status and ctype == "application/json" and words in err["message"]


def test_unknown_get_route_is_404(server):
    status, _, body = call(server, "GET", "/nope")
    assert status == 404 and "error" in json.loads(body)


class _FailsOnce:
    """A tokenizer whose first decode raises (a fault inside engine.step, after the request left)."""

    def __init__(self, tok):
        self.tok, self.failed = tok, False

    def __getattr__(self, name):
        return getattr(self.tok, name)

    def decode(self, ids):
        if not self.failed:
            self.failed = True
            raise RuntimeError("decode failed")
        return self.tok.decode(ids)


def test_an_engine_failure_fails_the_live_requests_and_the_loop_keeps_serving():
    loop = EngineLoop(tiny_engine(_FailsOnce(char_tokenizer("abc"))))
    loop.start()
    events: queue.Queue = queue.Queue()
    params = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)
    try:
        loop.submit([1, 2], params, events, 0, False, ANYONE)
        assert events.get(timeout=30)[1:] == ("error", "engine failure: RuntimeError: decode failed")
        loop.submit([1, 2], params, events, 1, False, ANYONE)
        tag, kind, out = events.get(timeout=30)
        assert (tag, kind, len(out.outputs[0].token_ids)) == (1, "done", 2)
    finally:
        loop.stop()


class _ScriptedEngine:
    """Only the engine's public contract: add_request, step (cumulative outputs, unfinished ones
    too), abort, has_unfinished. The loop must need nothing else."""

    version = 0

    def __init__(self, steps: int):
        self.steps, self.done, self.live = steps, 0, False

    def add_request(self, ids, params):
        self.live = True
        return 7

    def has_unfinished(self):
        return self.live

    def step(self):
        self.done += 1
        n, finished = self.done, self.done == self.steps
        self.live = not finished
        c = CompletionOutput(0, list(range(10, 10 + n)), [0.0] * n, [0] * n, "all" if finished else "",
                             "length" if finished else None)
        return [RequestOutput(7, [1, 2], [c], finished)]

    def abort(self, request_id):
        raise AssertionError("nothing to abort")


def test_the_loop_streams_the_new_tokens_of_each_step_output():
    loop = EngineLoop(_ScriptedEngine(steps=3), max_running=1)
    loop.start()
    events: queue.Queue = queue.Queue()
    try:
        loop.submit([1, 2], SamplingParams(max_tokens=3), events, 0, True, ANYONE)
        got = [events.get(timeout=30)[1:] for _ in range(4)]
    finally:
        loop.stop()
    assert got[:3] == [("delta", (0, [10])), ("delta", (0, [11])), ("delta", (0, [12]))]
    assert got[3][0] == "done" and got[3][1].outputs[0].text == "all"


def test_a_request_past_its_deadline_gets_504_and_is_cancelled():
    srv = Server(tiny_engine(), port=0, cfg=ServeConfig(request_timeout_s=0.2))  # its engine loop never runs
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        status, _, body = call(srv, "POST", "/v1/completions", {"prompt": "ab", "max_tokens": 2})
        assert status == 504 and "request_timeout_s" in json.loads(body)["error"]["message"]
        status, _, raw = call(srv, "POST", "/v1/completions", {"prompt": "ab", "max_tokens": 2, "stream": True})
        assert status == 200 and '"type": "timeout_error"' in raw
        # both were queued, and taken out of the queue when they timed out
        ops = [srv.loop.inbox.get_nowait()[0] for _ in range(srv.loop.inbox.qsize())]
        assert ops == ["wake", "wake"] and len(srv.loop.queue) == 0
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_burst_of_clients_connecting_at_once_is_served(server):
    """128 clients connect in the same instant (a load test's start): none is reset (the
    listen backlog of socketserver's default, 5, lost about 5% of such a burst's requests)."""
    barrier, statuses = threading.Barrier(128), queue.Queue()

    def one():
        barrier.wait()
        try:
            statuses.put(call(server, "GET", "/v1/models")[0])
        except OSError as e:
            statuses.put(type(e).__name__)

    threads = [threading.Thread(target=one) for _ in range(128)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    got = [statuses.get_nowait() for _ in range(statuses.qsize())]
    assert got == [200] * 128, {s: got.count(s) for s in set(got)}
