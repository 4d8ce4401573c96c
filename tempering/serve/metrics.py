"""`ServeMetrics`: what `tempering serve` exports at `GET /metrics` for Prometheus, per tenant.

Counters: requests by tenant, kind (completion, chat, agent_run) and HTTP status; prompt and
completion tokens; agent runs by outcome (completed, cancelled, failed); sandbox executions of
agent runs' tool calls by reason (ok, nonzero_exit, timeout, ...). Histograms: request latency,
time to first token, time per output token after the first, and the wait for the engine.
Gauges, read from the engine loop when scraped: requests waiting and running per tenant, and the
policy version served. Its own registry (nothing of the process mixed in); it keeps no history.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from tempering.serve.traffic import CLIENT_CLOSED, ServedRecord

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_TOKEN = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class ServeMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        p = "tempering_serve_"
        self.requests = Counter(f"{p}requests", "Requests answered", ["tenant", "kind", "status"], registry=r)
        self.tokens = Counter(f"{p}tokens", "Tokens of served requests", ["tenant", "type"], registry=r)
        self.agent_runs = Counter(f"{p}agent_runs", "Agent runs ended", ["tenant", "outcome"], registry=r)
        self.sandbox = Counter(f"{p}sandbox_executions", "Agent runs' sandbox executions by how they ended",
                               ["tenant", "reason"], registry=r)
        self.latency = Histogram(f"{p}request_seconds", "Arrival to the last byte", ["tenant", "kind"],
                                 buckets=_LATENCY, registry=r)
        self.ttft = Histogram(f"{p}time_to_first_token_seconds", "Arrival to the first generated token", ["tenant"],
                              buckets=_LATENCY, registry=r)
        self.per_token = Histogram(f"{p}time_per_output_token_seconds", "Seconds per generated token after the first",
                                   ["tenant"], buckets=_TOKEN, registry=r)
        self.queue_wait = Histogram(f"{p}queue_seconds", "Waiting for the engine", ["tenant"], buckets=_LATENCY,
                                    registry=r)
        self.waiting = Gauge(f"{p}queue_depth", "Requests waiting for the engine", ["tenant"], registry=r)
        self.running = Gauge(f"{p}running", "Requests in the engine", ["tenant"], registry=r)
        self.version = Gauge(f"{p}policy_version", "The policy version served", registry=r)

    def observe(self, r: ServedRecord) -> None:
        self.requests.labels(r.tenant, r.kind, str(r.status)).inc()
        if r.kind == "agent_run" and r.status in (200, CLIENT_CLOSED):
            outcome = "cancelled" if r.status == CLIENT_CLOSED else "failed" if r.error else "completed"
            self.agent_runs.labels(r.tenant, outcome).inc()
            for _, call in r.tool_calls:
                if call.result is not None:
                    self.sandbox.labels(r.tenant, call.result.reason.value).inc()
        if r.status != 200:
            return
        self.latency.labels(r.tenant, r.kind).observe(r.latency_s)
        self.tokens.labels(r.tenant, "prompt").inc(r.prompt_tokens)
        self.tokens.labels(r.tenant, "completion").inc(r.completion_tokens)
        for value, histogram in ((r.ttft_s, self.ttft), (r.per_token_s, self.per_token), (r.queue_s, self.queue_wait)):
            if value is not None:
                histogram.labels(r.tenant).observe(value)

    def render(self, waiting: dict[str, int], running: dict[str, int], version: int) -> bytes:
        """The exposition text, with the gauges read now (`waiting`, `running`: per tenant)."""
        for tenant in set(waiting) | set(running):
            self.waiting.labels(tenant).set(waiting.get(tenant, 0))
            self.running.labels(tenant).set(running.get(tenant, 0))
        self.version.set(version)
        return generate_latest(self.registry)

