"""`PrometheusEndpoint`: the running trainer's metrics at `GET /metrics`, for Prometheus to scrape.

It serves the values of the last step logged (prometheus-client's own HTTP server, on a thread of
its own): a few named gauges a dashboard or an alert reads directly (`tempering_step`,
`tempering_reward_mean`, `tempering_tokens_per_second`, `tempering_staleness_mean` / `_max`,
`tempering_domain_reward{domain}`, `tempering_domain_pass_rate{domain}`) and every other number of
the step as `tempering_metric{name="<metrics.jsonl key>"}`. Gauges, not counters: a step's
values are that step's (the run's totals are in metrics.jsonl). It keeps no history and pushes
nowhere; `Metrics` owns it and feeds it each step.
"""

from __future__ import annotations

from pathlib import Path

from tempering.errors import UserError

PORT_FILE = "prometheus.port"
NAMED = {"reward/mean": "reward_mean", "tokens_per_s": "tokens_per_second", "staleness/mean": "staleness_mean",
         "staleness/max": "staleness_max"}
PER_DOMAIN = {"reward/domain/": "domain_reward", "outcome/": "domain_pass_rate"}


class PrometheusEndpoint:
    def __init__(self, run_dir: Path, host: str, port: int):
        from prometheus_client import CollectorRegistry, Gauge, start_http_server

        self.registry = CollectorRegistry()  # its own: nothing of the process (GC, platform) is mixed in
        self._step = Gauge("tempering_step", "The RL step logged last", registry=self.registry)
        self._named = {key: Gauge(f"tempering_{name}", f"metrics.jsonl {key} of the last step", registry=self.registry)
                       for key, name in NAMED.items()}
        self._domain = {prefix: Gauge(f"tempering_{name}", f"metrics.jsonl {prefix}<domain> of the last step",
                                      ["domain"], registry=self.registry) for prefix, name in PER_DOMAIN.items()}
        self._other = Gauge("tempering_metric", "Any other number of the last step, by its metrics.jsonl key",
                            ["name"], registry=self.registry)
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as e:
            raise UserError(f"metrics.prometheus_port: cannot serve on {host}:{port} ({e.strerror or e})") from None
        self.port = self._server.server_port
        self.url = f"http://{host}:{self.port}/metrics"
        (run_dir / PORT_FILE).write_text(f"{self.port}\n")

    def update(self, step: int, flat: dict[str, float]) -> None:
        """Serve `flat` (one step's numbers, as written to metrics.jsonl) from now on."""
        self._step.set(step)
        for key, value in flat.items():
            if key in self._named:
                self._named[key].set(value)
                continue
            prefix = next((p for p in self._domain if key.startswith(p) and "/" not in key[len(p):]), None)
            if prefix is not None:
                self._domain[prefix].labels(domain=key[len(prefix):]).set(value)
            else:
                self._other.labels(name=key).set(value)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
