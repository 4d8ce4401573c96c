"""The dashboard in headless Chromium (Debian's, driven by Playwright): against the short real
run of the session (conftest's `short_run` and `browser`) and against the hand-built run of test_view, whose
sample with a sandboxed tool call is known. The oracles are the run's own files (metrics.jsonl,
lineage.sqlite) and what test_view wrote. Screenshots go to test-artifacts/view/."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from run_helpers import VIEW_ARTIFACTS as ARTIFACTS
from test_view import write_run
from tempering.view.server import start_view


def open_view(browser, run_dir: Path, ready: str = "#domains tr[data-domain]"):
    """The page of `run_dir` in a new tab, once `ready` shows; its console errors are collected."""
    server, _, url = start_view(run_dir, port=0)
    page = browser.new_page(viewport={"width": 1400, "height": 1800})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.wait_for_selector(ready)
    return server, page, errors


def test_a_real_run_its_domains_charts_and_a_sample(browser, short_run):
    assert short_run.returncode == 0, short_run.stderr[-2000:]
    rows = [json.loads(line) for line in (short_run.dir / "metrics.jsonl").read_text().splitlines()]
    latest = {k.removeprefix("reward/domain/"): v for r in rows for k, v in r.items() if k.startswith("reward/domain/")}
    domains = set(latest)
    server, page, errors = open_view(browser, short_run.dir)
    try:
        table = page.locator("#domains tr[data-domain]")
        assert sorted(table.evaluate_all("rows => rows.map(r => r.dataset.domain)")) == sorted(domains)
        # sorted by reward, highest first, at the second click on its header
        page.click("#domains th[data-key=reward]")
        page.click("#domains th[data-key=reward]")
        shown = table.evaluate_all("rows => rows.map(r => r.dataset.domain)")
        assert [latest[d] for d in shown] == sorted(latest.values(), reverse=True)
        page.fill("#domain-search", "cod")
        assert table.evaluate_all("rows => rows.filter(r => r.offsetParent !== null).map(r => r.dataset.domain)") \
            == ["code"]
        page.fill("#domain-search", "")
        for chart in ("reward", "throughput", "utilisation", "staleness", "shares", "sandbox-reasons"):
            page.wait_for_selector(f"#chart-{chart} .main-svg")  # drawn by plotly
        page.screenshot(path=str(ARTIFACTS / "real-run.png"), full_page=True)

        # the sample browser, filtered to the code domain: open the first sample
        with sqlite3.connect(f"file:{short_run.dir / 'lineage.sqlite'}?mode=ro", uri=True) as db:
            code = db.execute("SELECT id, components FROM samples WHERE domain = 'code' ORDER BY id").fetchall()
            calls = dict(db.execute("SELECT sample_id, count(*) FROM tool_calls GROUP BY sample_id").fetchall())
        page.fill("#filter-domain", "code")
        page.click("#sample-filters button[type=submit]")
        page.wait_for_function(f"document.querySelectorAll('tr.sample-row').length === {min(len(code), 50)}")
        first = page.locator("tr.sample-row").first
        sample_id = int(first.get_attribute("data-id"))
        assert sample_id == code[0][0]
        first.click()
        detail = page.locator("#sample-detail .reward-components")
        detail.wait_for()
        for name in json.loads(code[0][1]):
            assert name in detail.inner_text()
        assert page.locator("#sample-detail .tool-call").count() == calls.get(sample_id, 0)
        page.locator("#sample-detail").screenshot(path=str(ARTIFACTS / "real-run-sample.png"))
        assert errors == []
    finally:
        page.close()
        server.shutdown()
        server.server_close()


def test_a_sample_with_a_sandboxed_tool_call(browser, tmp_path):
    server, page, errors = open_view(browser, write_run(tmp_path / "run"))
    try:
        assert page.locator("#domains tr[data-domain]").count() == 2
        page.select_option("#filter-fate", "trained")
        page.click("#sample-filters button[type=submit]")
        page.wait_for_function("document.querySelectorAll('tr.sample-row').length === 1")
        page.click("tr.sample-row[data-id='1']")
        call = page.locator("#sample-detail .tool-call")
        call.wait_for()
        assert call.count() == 1 and call.get_attribute("data-name") == "run"
        text = call.inner_text()
        for shown in ("ls", "nonzero_exit", "so", "se", "7.5"):  # arguments, reason, stdout, stderr, memory
            assert shown in text, shown
        components = page.locator("#sample-detail .reward-components").inner_text()
        assert "outcome" in components and "format" in components
        page.locator("#sample-detail").screenshot(path=str(ARTIFACTS / "tool-call-sample.png"))
        assert errors == []
    finally:
        page.close()
        server.shutdown()
        server.server_close()
