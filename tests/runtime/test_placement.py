"""Resource arithmetic behind the Ray runtime's placement checks and messages (no cluster needed)."""

import pytest

from tempering.runtime import Resources
from tempering.runtime.placement import check_fits_group, fits, shortfall

NODES = [{"CPU": 1, "slot": 2}, {"CPU": 1, "slot": 2}]


def test_a_request_fits_what_covers_it_and_zero_asks_for_nothing():
    assert fits({"CPU": 0, "slot": 2}, {"slot": 2})
    assert not fits({"CPU": 1, "slot": 2}, {"slot": 2})
    assert not fits({"gpu": 1}, {"CPU": 8})


def test_a_worker_larger_than_its_bundle_is_refused_at_once():
    bundles = [{"slot": 2}, {"CPU": 1, "slot": 1}]
    check_fits_group("w", Resources(cpus=1), "g", bundles)  # bundle 1 holds it
    check_fits_group("w", Resources(cpus=0, custom={"slot": 2}), "g", bundles)
    with pytest.raises(ValueError, match=r"worker w: \{'CPU': 1\} fits no bundle of placement group g \[\{'slot'"):
        check_fits_group("w", Resources(cpus=1, bundle=0), "g", bundles)


def test_shortfall_names_what_is_missing_in_total_and_per_node():
    total = free = {"CPU": 2, "slot": 4}
    assert shortfall([{"slot": 2}] * 3, total, free, NODES) == "slot 6 asked, the cluster has 4 (4 free)"
    assert shortfall([{"slot": 3}], total, free, NODES) == "bundle 0 {'slot': 3} fits no node"
    assert shortfall([{"slot": 1}], total, {"slot": 0}, NODES) == "slot 1 asked, the cluster has 4 (0 free)"
    # enough in total and per node: only the strategy (three STRICT_SPREAD bundles on two nodes) is left
    assert "strategy cannot place" in shortfall([{"slot": 1}] * 3, total, free, NODES)
