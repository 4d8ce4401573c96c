"""GET /metrics of `tempering serve`, parsed with prometheus_client's own parser: per-tenant request
counts by status, latency, first-token and per-token histograms, tokens, the queue depth while
requests wait, and the policy version."""

from __future__ import annotations

import threading
import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from serve_helpers import AFTER_USER, ANSWER, chat_policy, client, serving, wait_until

from tempering.config import ServeConfig, TenantConfig
from tempering.engine import LLM
from tempering.serve.server import Server
from tempering.serve.tenants import Tenants

USER = [{"role": "user", "content": "hi"}]
KEY = "sk-carol-0123456789"


def scrape(srv) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{srv.server_address[1]}/metrics", timeout=30).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_requests_tokens_and_latencies_are_counted_per_tenant(tmp_path):
    keys = tmp_path / "keys.toml"
    keys.write_text(f'"{KEY}" = "carol"\n')
    cfg = ServeConfig(tenants={"carol": TenantConfig(requests_per_s=0.01, burst=2)})
    model, tok = chat_policy([AFTER_USER, *ANSWER])
    with serving(model, tok, cfg=cfg, keys_file=str(keys)) as srv:
        c = client(srv, KEY)
        for _ in range(2):
            c.chat.completions.create(model="tiny", messages=USER)
        try:
            c.chat.completions.create(model="tiny", messages=USER)
        except Exception:  # noqa: BLE001 - its 429 is what is counted below
            pass
        m = scrape(srv)
    tenant = ("tenant", "carol")
    assert m[("tempering_serve_requests_total", (("kind", "chat"), ("status", "200"), tenant))] == 2
    assert m[("tempering_serve_requests_total", (("kind", "chat"), ("status", "429"), tenant))] == 1
    assert m[("tempering_serve_request_seconds_count", (("kind", "chat"), tenant))] == 2
    assert m[("tempering_serve_time_to_first_token_seconds_count", (tenant,))] == 2
    assert m[("tempering_serve_time_per_output_token_seconds_count", (tenant,))] == 2
    assert m[("tempering_serve_tokens_total", (tenant, ("type", "completion")))] == 6  # two pieces and the end, twice
    assert m[("tempering_serve_policy_version", ())] == 0


def test_the_queue_depth_counts_requests_waiting_for_the_engine():
    model, tok = chat_policy([AFTER_USER, *ANSWER])
    srv = Server(LLM(model, tok, max_seq_len=512), port=0, model_name="tiny", cfg=ServeConfig(request_timeout_s=30),
                 tenants=Tenants.load(ServeConfig()))
    threading.Thread(target=srv.serve_forever, daemon=True).start()  # the engine loop is not started: all wait
    try:
        waiting = [threading.Thread(target=_ask, args=(srv,), daemon=True) for _ in range(3)]
        for t in waiting:
            t.start()
        depth = ("tempering_serve_queue_depth", (("tenant", "default"),))
        assert wait_until(lambda: scrape(srv).get(depth) == 3)
        srv.loop.start()  # now they run
        assert wait_until(lambda: scrape(srv).get(depth) == 0)
        for t in waiting:
            t.join(30)
        assert scrape(srv)[("tempering_serve_requests_total", (("kind", "chat"), ("status", "200"),
                                                               ("tenant", "default")))] == 3
    finally:
        srv.shutdown()
        srv.server_close()
        srv.release()


def _ask(srv) -> None:
    client(srv).chat.completions.create(model="tiny", messages=USER)
