// The `tempering view` page: fetches /api/*, fills the header, served traffic (when the directory
// has any), the domain table, the charts and the sample browser, and polls every few seconds while the run is live (no summary.json yet).
// Every chart is plotly.js; sample text is set with textContent, never parsed as HTML.
"use strict";

const POLL_MS = 4000;
const TOP = 40;  // bars per per-domain chart: with hundreds of domains, show the ones that stand out
const state = { run: null, domains: [], sort: { key: "domain", dir: 1 }, filter: "", offset: 0, limit: 50,
                filters: new URLSearchParams(), selected: null, servedSelected: null, served: false };
const $ = (id) => document.getElementById(id);
const fmt = (v, digits = 3) => (v === null || v === undefined ? "–" : typeof v === "number" ? +v.toFixed(digits) : v);
const layout = (title, extra = {}) => ({ title: { text: title, font: { size: 13 } },
                                         legend: { orientation: "h", y: -0.2 },
                                         margin: { l: 50, r: 15, t: 35, b: 40 }, ...extra });
const CONFIG = { displaylogo: false, responsive: true };
const MODE = (n) => (n > 200 ? "lines" : "lines+markers");  // markers would hide a long run's line

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") node.textContent = v;
    else if (k === "class") node.className = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

async function api(path) {
  const res = await fetch(path);
  const body = await res.json();
  if (!res.ok) throw new Error(body.error || `${path}: HTTP ${res.status}`);
  return body;
}

// ---- header ---------------------------------------------------------------------------------

function renderRun(run) {
  state.run = run;
  document.title = `${run.name} · tempering view`;
  $("run-name").textContent = run.name;
  $("run-status").textContent = run.status;
  $("run-status").className = `status ${run.status}`;
  $("run-step").textContent = fmt(run.step, 0);
  $("run-steps").textContent = run.steps ? ` / ${run.steps}` : "";
  $("run-reward").textContent = fmt(run.reward, 4);
  $("run-dir").textContent = run.run_dir;
  $("warnings").textContent = run.warnings.join("; ");
}

const TRAINING = ["domains-section", "samples-section", "chart-reward", "chart-throughput", "chart-utilisation",
                  "chart-staleness", "chart-shares"];

// ---- domain table ---------------------------------------------------------------------------

const sparkObserver = new IntersectionObserver((entries) => {
  for (const e of entries) {
    if (!e.isIntersecting) continue;
    sparkObserver.unobserve(e.target);
    const pts = JSON.parse(e.target.dataset.points);
    Plotly.newPlot(e.target, [{ x: pts.map((p) => p[0]), y: pts.map((p) => p[1]), mode: "lines",
                                line: { width: 1.5, color: "#3a6ea5" }, hoverinfo: "skip" }],
      { margin: { l: 2, r: 2, t: 2, b: 2 }, width: 130, height: 30, showlegend: false,
        xaxis: { visible: false }, yaxis: { visible: false },
        paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)" },
      { staticPlot: true, displayModeBar: false });
  }
}, { rootMargin: "200px" });

function renderDomains() {
  const { key, dir } = state.sort;
  const needle = state.filter.toLowerCase();
  const rows = state.domains.filter((d) => d.domain.toLowerCase().includes(needle));
  rows.sort((a, b) => {
    const x = a[key], y = b[key];
    if (x === y) return 0;
    if (x === null || x === undefined) return 1;  // missing values last, either direction
    if (y === null || y === undefined) return -1;
    return (x < y ? -1 : 1) * dir;
  });
  const body = $("domains").tBodies[0];
  for (const old of body.querySelectorAll("td.spark > div")) { sparkObserver.unobserve(old); Plotly.purge(old); }
  body.replaceChildren(...rows.map((d) => {
    const spark = el("div", { "data-points": JSON.stringify(d.rewards) });
    sparkObserver.observe(spark);
    return el("tr", { "data-domain": d.domain }, el("td", { text: d.domain }),
      ...["reward", "pass_rate", "share_target", "share", "weight"].map((k) => el("td", { text: fmt(d[k]) })),
      el("td", { class: "spark" }, spark));
  }));
  $("domains-count").textContent = `${rows.length} of ${state.domains.length}`;
  for (const th of $("domains").tHead.rows[0].cells) {
    th.classList.toggle("sorted-asc", th.dataset.key === key && dir === 1);
    th.classList.toggle("sorted-desc", th.dataset.key === key && dir === -1);
  }
  $("domain-list").replaceChildren(...state.domains.map((d) => el("option", { value: d.domain })));
}

// ---- charts ---------------------------------------------------------------------------------

function renderMetrics({ rows, utilisation: u }) {
  const steps = rows.map((r) => r.step);
  const col = (k) => rows.map((r) => (r[k] === undefined ? null : r[k]));
  Plotly.react("chart-reward", [{ x: steps, y: col("reward/mean"), mode: MODE(rows.length), name: "reward/mean" }],
    layout("reward (mean over the step's samples)", { xaxis: { title: "step" } }), CONFIG);
  Plotly.react("chart-throughput", [{ x: steps, y: col("tokens_per_s"), mode: MODE(rows.length), name: "tokens/s" }],
    layout("throughput (tokens/s)", { xaxis: { title: "step" } }), CONFIG);
  const line = (k, name) => ({ x: u.step, y: u[k], mode: MODE(rows.length), name });
  Plotly.react("chart-utilisation", [line("trainer_busy", "trainer computing"),
                                     line("trainer_idle", "trainer waiting for rollouts"),
                                     line("engine_busy", "engine generating"),
                                     line("sandbox_busy", "sandbox running tools")],
    layout("busy seconds / step wall time (engine, sandbox: summed over workers, may exceed 1)",
           { xaxis: { title: "step" }, yaxis: { rangemode: "tozero" } }), CONFIG);
}

function renderShares(domains) {
  const gap = (d) => Math.abs((d.share ?? 0) - (d.share_target ?? 0));
  const top = [...domains].filter((d) => d.share_target !== null || d.share !== null)
    .sort((a, b) => gap(b) - gap(a)).slice(0, TOP).sort((a, b) => a.domain.localeCompare(b.domain));
  const names = top.map((d) => d.domain);
  const note = domains.length > TOP ? ` (the ${TOP} largest gaps of ${domains.length})` : "";
  Plotly.react("chart-shares", [{ type: "bar", x: names, y: top.map((d) => d.share_target), name: "target" },
                                { type: "bar", x: names, y: top.map((d) => d.share), name: "achieved" }],
    layout(`scheduler share per domain, latest step${note}`, { barmode: "group" }), CONFIG);
}

function renderStaleness({ counts }) {
  const fates = [...new Set(counts.map((c) => c[1]))];
  const traces = fates.map((f) => {
    const mine = counts.filter((c) => c[1] === f);
    return { type: "bar", name: f, x: mine.map((c) => c[0]), y: mine.map((c) => c[2]) };
  });
  const empty = counts.length ? [] : [{ text: "no samples in the lineage store yet", showarrow: false,
                                        xref: "paper", yref: "paper", x: 0.5, y: 0.5 }];
  Plotly.react("chart-staleness", traces,
    layout("samples by version lag (step − oldest policy version of its tokens; lineage)",
           { barmode: "stack", xaxis: { title: "versions behind", dtick: 1 }, yaxis: { title: "samples" },
             annotations: empty }), CONFIG);
}

function renderSandbox(sb) {
  const reasons = Object.keys(sb.reasons);
  Plotly.react("chart-sandbox-reasons", [{ type: "bar", x: reasons, y: reasons.map((r) => sb.reasons[r]) }],
    layout(`sandbox executions by outcome (${sb.executions} in all)`), CONFIG);
  const top = [...sb.latency].sort((a, b) => (b.wall_p99 ?? 0) - (a.wall_p99 ?? 0)).slice(0, TOP);
  const names = top.map((d) => d.domain);
  const note = sb.latency.length > TOP ? ` (the ${TOP} slowest of ${sb.latency.length} domains)` : "";
  Plotly.react("chart-sandbox-latency", [
    { type: "bar", x: names, y: top.map((d) => d.wall_p50), name: "p50" },
    { type: "bar", x: names, y: top.map((d) => d.wall_p99), name: "p99" }],
    layout(`sandbox wall seconds per execution${note}`, { barmode: "group" }), CONFIG);
}

// ---- sample browser -------------------------------------------------------------------------

function readFilters() {  // applied on submit, so a poll never reads a half-typed filter
  const q = new URLSearchParams();
  for (const param of ["domain", "fate", "reward_min", "reward_max", "step_min", "step_max"]) {
    const value = $(`filter-${param.replace("_", "-")}`).value;
    if (value !== "") q.set(param, value);
  }
  state.filters = q;
}

async function loadSamples() {
  $("samples-error").textContent = "";
  let page;
  const q = new URLSearchParams(state.filters);
  q.set("limit", state.limit);
  q.set("offset", state.offset);
  try {
    page = await api(`/api/samples?${q}`);
  } catch (e) {
    $("samples-error").textContent = e.message;
    return;
  }
  const shown = page.samples.length;
  $("samples-note").textContent = page.note || "";
  $("samples-count").textContent = `${page.total} matching`;
  $("samples-page").textContent = shown ? `${page.offset + 1}–${page.offset + shown} of ${page.total}` : "";
  $("samples-prev").disabled = page.offset === 0;
  $("samples-next").disabled = page.offset + shown >= page.total;
  $("samples").tBodies[0].replaceChildren(...page.samples.map((s) => {
    const row = el("tr", { class: "sample-row", "data-id": s.id },
      ...[s.id, s.step, s.domain, s.fate, fmt(s.reward), s.tokens, s.finish_reason, `${s.version_min}–${s.version_max}`]
        .map((v) => el("td", { text: v ?? "–" })),
      el("td", { class: "text", text: s.preview }));
    row.classList.toggle("selected", s.id === state.selected);
    row.addEventListener("click", () => showSample(s.id));
    return row;
  }));
}

function section(title, ...children) { return [el("h3", { text: title }), ...children]; }

function rewardTable(s) {
  const weights = s.weights || {};
  const names = [...new Set([...Object.keys(s.components), ...Object.keys(weights)])];
  const known = (n) => s.components[n] !== undefined && weights[n] !== undefined;
  const product = (n) => (known(n) ? s.components[n] * weights[n] : null);
  return el("div", { class: "reward-components" },
    el("p", { text: `total ${fmt(s.reward, 4)}${s.failed ? " (failed)" : ""}${s.reason ? ` — ${s.reason}` : ""}` }),
    el("table", {},
      el("tr", {}, ...["component", "value", "weight", "value × weight"].map((t) => el("th", { text: t }))),
      ...names.map((n) => el("tr", {}, ...[n, fmt(s.components[n]), fmt(weights[n]), fmt(product(n))]
        .map((t) => el("td", { text: t }))))));
}

function toolCall(c) {
  const meta = [c.error_kind && `error: ${c.error_kind}`, c.exec_reason && `reason: ${c.exec_reason}`,
    c.exit_code !== null && `exit ${c.exit_code}`, c.wall_s !== null && `wall ${fmt(c.wall_s)} s`,
    c.cpu_s !== null && `cpu ${fmt(c.cpu_s)} s`, c.peak_memory_mb !== null && `${fmt(c.peak_memory_mb, 1)} MB`,
    c.start && `${c.start} start`, c.truncated && "output truncated"];
  const block = (label, text) => (text ? el("div", {}, label, el("pre", { text })) : null);
  return el("div", { class: "tool-call", "data-name": c.name },
    el("div", {}, el("b", { text: c.name }), ` (turn ${c.turn}, call ${c.position})`),
    el("pre", { text: JSON.stringify(c.arguments, null, 1) }),
    el("div", { class: "meta", text: meta.filter(Boolean).join(" · ") }),
    c.error ? el("pre", { class: "error", text: c.error }) : null,
    block("stdout", c.stdout), block("stderr", c.stderr),
    c.output !== c.stdout ? block("output to the model", c.output) : null);
}

async function showSample(id) {
  state.selected = id;
  for (const r of document.querySelectorAll("tr.sample-row")) {
    r.classList.toggle("selected", r.dataset.id === String(id));
  }
  const panel = $("sample-detail");
  let s;
  try {
    s = await api(`/api/sample/${id}`);
  } catch (e) {
    panel.replaceChildren(el("p", { class: "error", text: e.message }));
    return;
  }
  const turns = s.turns.length
    ? el("pre", { text: s.turns.map(([role, a, b]) => `${role}: tokens ${a}–${b}`).join("\n") })
    : el("p", { class: "muted", text: "single turn" });
  panel.replaceChildren(
    el("div", { text: `#${s.id} · step ${s.step} · ${s.domain} · ${s.task} · sample ${s.sample_index} · ${s.fate} · ` +
                      `${s.tokens} tokens · finish ${s.finish_reason} · versions ${s.version_min}–${s.version_max}` }),
    ...section("reward", rewardTable(s)), ...section("prompt", el("pre", { text: s.prompt })),
    ...section("completion", el("pre", { text: s.completion })), ...section("turns", turns),
    ...section(`tool calls (${s.tool_calls.length})`, ...s.tool_calls.map(toolCall)));
}

// ---- served traffic (tempering serve's serve.log_dir) ---------------------------------------

function renderServed(s) {
  state.served = s.served;
  $("served-section").hidden = !s.served;
  if (!s.served) return;
  $("served-count").textContent = `${s.requests} requests, ${s.tenants.length} tenants`;
  $("served-tenants").tBodies[0].replaceChildren(...s.tenants.map((t) => el("tr", { "data-tenant": t.tenant },
    el("td", { text: t.tenant }),
    ...[t.requests, t.errors, t.rate_limited, t.agent_runs, fmt(t.mean_reward), fmt(t.latency_p50),
        fmt(t.latency_p99), fmt(t.ttft_p50), t.completion_tokens].map((v) => el("td", { text: v ?? "–" })))));
  const select = $("served-tenant");
  const chosen = select.value;
  select.replaceChildren(el("option", { value: "", text: "any" }),
                         ...s.tenants.map((t) => el("option", { value: t.tenant, text: t.tenant })));
  select.value = chosen;
  const names = [...new Set(s.timeline.map((r) => r[1]))];
  const series = (col) => names.map((n) => {
    const mine = s.timeline.filter((r) => r[1] === n);
    return { x: mine.map((r) => new Date(r[0] * 1000)), y: mine.map((r) => r[col]), name: n, mode: "lines+markers" };
  });
  Plotly.react("chart-served-requests", series(2), layout(`requests per ${s.bucket_s} s, per tenant`), CONFIG);
  Plotly.react("chart-served-latency", series(3), layout(`mean latency (s) per ${s.bucket_s} s, per tenant`), CONFIG);
  return loadServed();
}

async function loadServed() {
  const q = new URLSearchParams({ limit: 50 });
  for (const [param, id] of [["tenant", "served-tenant"], ["kind", "served-kind"]]) {
    if ($(id).value) q.set(param, $(id).value);
  }
  let page;
  try {
    page = await api(`/api/served/requests?${q}`);
  } catch (e) {
    $("served-error").textContent = e.message;
    return;
  }
  $("served-error").textContent = "";
  $("served").tBodies[0].replaceChildren(...page.requests.map((r) => {
    const row = el("tr", { class: "served-row", "data-id": r.id },
      ...[r.id, new Date(r.time * 1000).toLocaleTimeString(), r.tenant, r.kind, r.status, r.version, fmt(r.latency_s),
          r.completion_tokens, fmt(r.reward)].map((v) => el("td", { text: v ?? "–" })),
      el("td", { class: "text", text: r.preview ?? "" }));
    row.classList.toggle("selected", r.id === state.servedSelected);
    row.addEventListener("click", () => showServed(r.id));
    return row;
  }));
}

async function showServed(id) {
  state.servedSelected = id;
  for (const r of document.querySelectorAll("tr.served-row")) r.classList.toggle("selected", r.dataset.id === String(id));
  const panel = $("served-detail");
  let r;
  try {
    r = await api(`/api/served/${id}`);
  } catch (e) {
    panel.replaceChildren(el("p", { class: "error", text: e.message }));
    return;
  }
  const reward = r.reward === null ? [] : section("reward", el("p", { class: "served-reward",
    text: `${fmt(r.reward, 4)}${r.reward_reason ? ` — ${r.reward_reason}` : ""}` }));
  panel.replaceChildren(...[
    el("div", { class: "served-head", text: `#${r.id} · ${r.tenant} · ${r.kind} · HTTP ${r.status} · version ${r.version}` +
      ` · ${fmt(r.latency_s)} s (first token ${fmt(r.ttft_s)} s, queued ${fmt(r.queue_s)} s) · ` +
      `${r.prompt_tokens} + ${r.completion_tokens} tokens · finish ${r.finish_reason || "–"}${r.task ? ` · task ${r.task}` : ""}` }),
    r.error ? el("pre", { class: "error", text: r.error }) : null, ...reward,
    ...section("prompt", el("pre", { text: r.prompt })), ...section("completion", el("pre", { text: r.completion })),
    ...section(`tool calls (${r.tool_calls.length})`, ...r.tool_calls.map(toolCall))].filter(Boolean));
}

// ---- wiring ---------------------------------------------------------------------------------

const VIEWS = [["/api/run", renderRun], ["/api/served", renderServed], ["/api/domains", renderDomainData],
               ["/api/metrics?keys=reward/mean,tokens_per_s", renderMetrics], ["/api/staleness", renderStaleness],
               ["/api/sandbox", renderSandbox]];

async function refresh() {
  // each part separately: an unreadable lineage store must not blank the charts drawn from metrics.jsonl
  const results = await Promise.allSettled(VIEWS.map(([path, render]) => api(path).then(render)));
  // a directory of served traffic only (tempering serve's serve.log_dir) has no training to show
  const servedOnly = state.served && state.run && !state.run.has_metrics;
  for (const id of TRAINING) $(id).hidden = servedOnly;
  await loadSamples();
  const failed = results.filter((r) => r.status === "rejected").map((r) => r.reason.message);
  $("warnings").textContent = [...(state.run ? state.run.warnings : []), ...failed].join("; ");
  // poll only while live; a finished run will not change. A timeout after each refresh, so polls never overlap.
  if (state.run && state.run.status === "live") setTimeout(refresh, POLL_MS);
}

function renderDomainData(domains) {
  state.domains = domains;
  renderDomains();
  renderShares(domains);
}

function wire() {
  $("domain-search").addEventListener("input", (e) => { state.filter = e.target.value; renderDomains(); });
  for (const th of $("domains").tHead.rows[0].cells) {
    if (!th.dataset.key) continue;
    th.addEventListener("click", () => {
      const k = th.dataset.key;
      state.sort = { key: k, dir: state.sort.key === k ? -state.sort.dir : 1 };
      renderDomains();
    });
  }
  $("sample-filters").addEventListener("submit", (e) => {
    e.preventDefault();
    readFilters();
    state.offset = 0;
    loadSamples();
  });
  $("samples-prev").addEventListener("click", () => {
    state.offset = Math.max(0, state.offset - state.limit);
    loadSamples();
  });
  $("samples-next").addEventListener("click", () => { state.offset += state.limit; loadSamples(); });
  $("served-filters").addEventListener("submit", (e) => { e.preventDefault(); loadServed(); });
}

wire();
refresh();
