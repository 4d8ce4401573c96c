"""Resource arithmetic for placing workers and placement groups: what a request asks for, whether
it fits a bundle, and what a cluster lacks for a group of bundles, said in words.

`runtime.ray` uses it for its early checks and for the messages of placements that did not
happen in time; it is plain arithmetic over resource dicts ({"CPU": 1, "slot": 4}, ...), so it
needs no cluster to run or test. It decides nothing about where anything runs.
"""

from __future__ import annotations

from typing import Sequence

from tempering.runtime.interface import Resources

Bundle = dict[str, float]


def wanted(res: Resources) -> Bundle:
    """What a worker asks a node (or its bundle) for."""
    return {"CPU": res.cpus, **res.custom}


def describe(resources: Bundle) -> str:
    return "{" + ", ".join(f"{k!r}: {v:g}" for k, v in resources.items()) + "}"


def fits(request: Bundle, offer: Bundle) -> bool:
    """Whether `offer` (a node's or a bundle's resources) covers `request`; zero asks for nothing."""
    return all(offer.get(k, 0.0) >= v for k, v in request.items() if v)


def check_fits_group(worker: str, res: Resources, group: str, bundles: Sequence[Bundle]) -> None:
    """A request larger than its bundle would never be placed: say so now, not at a deadline."""
    chosen = bundles if res.bundle < 0 else bundles[res.bundle:res.bundle + 1]
    if not any(fits(wanted(res), b) for b in chosen):
        raise ValueError(f"worker {worker}: {describe(wanted(res))} fits no bundle of placement group {group} "
                         f"{list(chosen)} (a worker that needs no CPU asks for cpus=0)")


def shortfall(bundles: Sequence[Bundle], total: Bundle, free: Bundle, nodes: Sequence[Bundle]) -> str:
    """Why `bundles` cannot be placed on a cluster with these `total` and `free` resources and
    these `nodes` (each node's total): what is short overall, and bundles no node could hold."""
    demand: Bundle = {}
    for b in bundles:
        for k, v in b.items():
            demand[k] = demand.get(k, 0.0) + v
    short = [f"{k} {v:g} asked, the cluster has {total.get(k, 0.0):g} ({free.get(k, 0.0):g} free)"
             for k, v in demand.items() if v > free.get(k, 0.0)]
    short += [f"bundle {i} {describe(b)} fits no node" for i, b in enumerate(bundles)
              if not any(fits(b, n) for n in nodes)]
    return "; ".join(short) or "enough resources in total, but the strategy cannot place the bundles on the nodes"
