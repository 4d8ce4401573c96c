"""`tempering view` of what `tempering serve` recorded, in headless Chromium (conftest's `browser`):
real traffic of two tenants (chat requests, a rate-limited one, an agent run that fixes a
terminal task in the sandbox) shows per tenant as the store has it, a served agent run opens with
its tool calls and their sandbox results, and a request served while the page is open appears
without a reload. The oracle is the store itself (`read_served`)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from run_helpers import VIEW_ARTIFACTS
from serve_helpers import client
from test_agent_runs import FIXER, needs_sandbox, post
from test_view_browser import open_view

from tempering.config import ServeConfig, TenantConfig
from tempering.engine import LLM
from tempering.models.scripted import scripted_policy
from tempering.serve.server import Server
from tempering.serve.tenants import Tenants
from tempering.serve.traffic import read_served

ALICE, BOB = "sk-alice-0123456789", "sk-bob-0123456789"
USER = [{"role": "user", "content": "hi"}]


@needs_sandbox
def test_the_dashboard_shows_served_traffic_live(browser, tmp_path):
    keys = tmp_path / "keys.toml"
    keys.write_text(f'"{ALICE}" = "alice"\n"{BOB}" = "bob"\n')
    log = tmp_path / "served"
    cfg = ServeConfig(tool_parser="compact", log_dir=str(log), tenants={"bob": TenantConfig(requests_per_s=0.01)})
    model, tok = scripted_policy(FIXER)
    srv = Server(LLM(model, tok, max_seq_len=4096), port=0, model_name="tiny", cfg=cfg,
                 tenants=Tenants.load(cfg, (), str(keys))).start()
    view = page = None
    try:
        for key in (ALICE, ALICE, BOB):
            client(srv, key).chat.completions.create(model="tiny", messages=USER)
        with pytest.raises(Exception, match="429"):
            client(srv, BOB).chat.completions.create(model="tiny", messages=USER)
        conn, resp = post(srv, {"task": {"terminal": "fix-median-even"}}, headers={"Authorization": f"Bearer {ALICE}"})
        assert json.loads(resp.read())["reward"]["total"] == 1.0
        conn.close()
        srv.traffic.flush()
        rows = read_served(log)
        per_tenant = Counter(r["tenant"] for r in rows)
        assert per_tenant == {"alice": 3, "bob": 2}

        view, page, errors = open_view(browser, log, "#served-tenants tr[data-tenant]")
        cells = page.locator("#served-tenants tr[data-tenant]").evaluate_all(
            "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
        shown = {c[0]: c for c in cells}
        assert {t: int(c[1]) for t, c in shown.items()} == per_tenant
        assert shown["bob"][3] == "1" and shown["alice"][4] == "1" and shown["alice"][5] == "1"  # 429s, runs, reward
        for chart in ("served-requests", "served-latency"):
            page.wait_for_selector(f"#chart-{chart} .main-svg")

        run = next(r for r in rows if r["kind"] == "agent_run")
        page.click(f"tr.served-row[data-id='{run['id']}']")
        calls = page.locator("#served-detail .tool-call")
        calls.first.wait_for()
        assert calls.evaluate_all("cs => cs.map(c => c.dataset.name)") == ["edit", "run", "submit"]
        assert "reason: ok" in calls.nth(1).inner_text() and "2.5" in calls.nth(1).inner_text()
        assert page.locator("#served-detail .served-reward").inner_text().startswith("1")
        page.screenshot(path=str(VIEW_ARTIFACTS / "served.png"), full_page=True)

        # live: a request served now shows at the next poll, without a reload
        client(srv, ALICE).chat.completions.create(model="tiny", messages=USER)
        page.wait_for_function("document.querySelector(\"#served-tenants tr[data-tenant='alice']\")"
                               ".cells[1].textContent === '4'", timeout=30_000)
        assert errors == []
    finally:
        if page is not None:
            page.close()
        if view is not None:
            view.shutdown()
            view.server_close()
        srv.close()
