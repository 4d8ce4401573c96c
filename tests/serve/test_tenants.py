"""Tenants through the official `openai` client: 401 without a valid key, 404 for another model,
429 with Retry-After past a tenant's rate; a keys file maps keys to tenants; the fair queue's order
(a flooding tenant waits behind its own requests) and the rate limiter's arithmetic."""

from __future__ import annotations

import http.client
import json

import pytest
from serve_helpers import AFTER_USER, ANSWER, chat_policy, client, openai, serving

from tempering.config import ServeConfig, TenantConfig
from tempering.errors import UserError
from tempering.serve.fair_queue import FairQueue
from tempering.serve.tenants import RateLimiter, Tenant, Tenants, read_keys_file

USER = [{"role": "user", "content": "hi"}]
ALICE, BOB = "sk-alice-0123456789", "sk-bob-0123456789"


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    keys = tmp_path_factory.mktemp("keys") / "keys.toml"
    keys.write_text(f'"{ALICE}" = "alice"\n"{BOB}" = "bob"\n')
    cfg = ServeConfig(tenants={"bob": TenantConfig(requests_per_s=0.01, burst=2)})
    model, tok = chat_policy([AFTER_USER, *ANSWER])
    with serving(model, tok, cfg=cfg, keys_file=str(keys)) as srv:
        yield srv


def test_a_valid_key_is_served_and_names_its_tenant(keyed):
    out = client(keyed, ALICE).chat.completions.create(model="tiny", messages=USER)
    assert out.choices[0].message.content == "It is sunny in Paris."
    assert 'tempering_serve_requests_total{kind="chat",status="200",tenant="alice"} 1.0' in _metrics(keyed)


@pytest.mark.parametrize("key", ["sk-wrong-0123456789", ALICE + "x"])
def test_without_a_valid_key_it_is_401(keyed, key):
    with pytest.raises(openai.AuthenticationError) as e:
        client(keyed, key).chat.completions.create(model="tiny", messages=USER)
    assert e.value.status_code == 401 and "API key" in str(e.value)
    with pytest.raises(openai.AuthenticationError):
        client(keyed, key).models.list()
    # no key at all (the client will not send none): plain HTTP
    conn = http.client.HTTPConnection("127.0.0.1", keyed.server_address[1], timeout=30)
    conn.request("POST", "/v1/chat/completions", body=json.dumps({"messages": USER}))
    resp = conn.getresponse()
    assert resp.status == 401 and resp.getheader("WWW-Authenticate") == "Bearer"
    assert json.loads(resp.read())["error"]["code"] == "invalid_api_key"
    conn.close()


def test_another_model_is_404_and_models_lists_the_served_one(keyed):
    with pytest.raises(openai.NotFoundError) as e:
        client(keyed, ALICE).chat.completions.create(model="gpt-4o", messages=USER)
    assert "'gpt-4o' does not exist" in str(e.value) and "'tiny'" in str(e.value)
    assert [m.id for m in client(keyed, ALICE).models.list()] == ["tiny"]


def test_past_its_rate_a_tenant_gets_429_with_retry_after_and_others_do_not(keyed):
    bob = client(keyed, BOB)
    for _ in range(2):  # its burst
        bob.chat.completions.create(model="tiny", messages=USER)
    with pytest.raises(openai.RateLimitError) as e:
        bob.chat.completions.create(model="tiny", messages=USER)
    # one request per 100 s: the next token comes in about 100 s
    assert 90 <= int(e.value.response.headers["Retry-After"]) <= 100 and "tenant bob" in str(e.value)
    client(keyed, ALICE).chat.completions.create(model="tiny", messages=USER)  # alice has no limit


def test_an_open_server_serves_without_a_key_and_the_version_is_a_header():
    model, tok = chat_policy([AFTER_USER, *ANSWER])
    with serving(model, tok) as srv:
        raw = client(srv).chat.completions.with_raw_response.create(model="tiny", messages=USER)
        assert raw.headers["X-Tempering-Version"] == "0" and raw.parse().system_fingerprint == "tempering-v0"


def test_the_keys_file_is_checked(tmp_path):
    bad = tmp_path / "k.toml"
    bad.write_text('"sk-0123456789" = 3\n')
    with pytest.raises(UserError, match="expected a tenant name") as e:
        read_keys_file(bad)
    assert "sk-0123456789" not in str(e.value)  # never printed whole
    bad.write_text('"short" = "a"\n')
    with pytest.raises(UserError, match="at least 8 characters"):
        read_keys_file(bad)
    tenants = Tenants.load(ServeConfig(tenants={"a": TenantConfig(priority=2)}), ["sk-default-key"])
    assert tenants.authenticate("Bearer sk-default-key").name == "default"
    assert tenants.authenticate("Basic sk-default-key") is None and tenants.get("a").priority == 2


def test_the_fair_queue_serves_a_light_tenant_ahead_of_a_heavy_backlog():
    fair, fifo = FairQueue("fair"), FairQueue("fifo")
    for q in (fair, fifo):
        for i in range(50):
            q.push("heavy", f"h{i}", cost=16)
        q.push("light", "l0", cost=16)
    assert [fifo.pop() for _ in range(51)][-1] == "l0"
    # both started at virtual time 0: the light one waits for the heavy one that came first only
    assert [fair.pop() for _ in range(3)] == ["h0", "l0", "h1"]
    assert len(fair) == 48 and fair.depths() == {"heavy": 48, "light": 0}


def test_the_fair_queue_gives_shares_and_serves_priorities_first():
    q = FairQueue("fair")
    for i in range(30):
        q.push("a", ("a", i), cost=1, share=2.0)
        q.push("b", ("b", i), cost=1, share=1.0)
    order = [q.pop()[0] for _ in range(30)]
    assert abs(order.count("a") - 20) <= 1  # two of a's for each of b's
    q.push("vip", ("vip", 0), cost=100, priority=1)
    assert q.pop() == ("vip", 0)
    item = ("b", 99)
    q.push("b", item, cost=1)
    assert q.remove(item) and not q.remove(item)


def test_the_rate_limiter_is_a_token_bucket():
    t = Tenant("t", requests_per_s=2.0, burst=3)
    limiter = RateLimiter()
    assert [limiter.admit(t, now=10.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.admit(t, now=10.0) == pytest.approx(0.5)
    assert limiter.admit(t, now=10.5) == 0.0 and limiter.admit(t, now=10.5) == pytest.approx(0.5)
    assert limiter.admit(Tenant("free"), now=0.0) == 0.0


def _metrics(srv) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{srv.server_address[1]}/metrics", timeout=30) as r:
        return r.read().decode()
