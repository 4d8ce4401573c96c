"""The Prometheus endpoint on its own: what a scrape returns for a step's values (the parser of
prometheus-client is the oracle for the format), and the errors a user can cause."""

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tempering.config import ConfigError, MetricsConfig
from tempering.errors import UserError
from tempering.prometheus import PrometheusEndpoint


def _scrape(url):
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_scrape_serves_the_last_step(tmp_path):
    endpoint = PrometheusEndpoint(tmp_path, "127.0.0.1", 0)
    try:
        assert (tmp_path / "prometheus.port").read_text().strip() == str(endpoint.port)
        endpoint.update(1, {"reward/mean": 0.1, "tokens_per_s": 50.0, "reward/domain/a": 0.2})
        endpoint.update(2, {"reward/mean": 0.25, "tokens_per_s": 120.5, "staleness/mean": 0.5, "staleness/max": 1.0,
                            "reward/domain/a": 0.3, "reward/domain/b": 0.7, "outcome/b": 0.5,
                            "scheduler/share/a": 0.4})
        got = _scrape(endpoint.url)
    finally:
        endpoint.close()
    assert got[("tempering_step", ())] == 2
    assert got[("tempering_reward_mean", ())] == 0.25 and got[("tempering_tokens_per_second", ())] == 120.5
    assert got[("tempering_staleness_mean", ())] == 0.5 and got[("tempering_staleness_max", ())] == 1.0
    assert got[("tempering_domain_reward", (("domain", "a"),))] == 0.3
    assert got[("tempering_domain_reward", (("domain", "b"),))] == 0.7
    assert got[("tempering_domain_pass_rate", (("domain", "b"),))] == 0.5
    assert got[("tempering_metric", (("name", "scheduler/share/a"),))] == 0.4
    assert not any(name.startswith(("python_", "process_")) for name, _ in got)  # a registry of its own


def test_a_taken_port_is_a_clear_error(tmp_path):
    first = PrometheusEndpoint(tmp_path, "127.0.0.1", 0)
    try:
        with pytest.raises(UserError, match=rf"metrics.prometheus_port: cannot serve on 127.0.0.1:{first.port}"):
            PrometheusEndpoint(tmp_path, "127.0.0.1", first.port)
    finally:
        first.close()


@pytest.mark.parametrize("port", [-2, 70000])
def test_a_port_out_of_range_names_the_key(port):
    with pytest.raises(ConfigError, match="metrics.prometheus_port"):
        MetricsConfig(prometheus_port=port)
