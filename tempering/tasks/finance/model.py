"""The report model: a `Spec` in, a `Report` out, generated once per process.

`generate(spec)` draws a company and its reporting choices from the seed (years, unit, name,
segments, regions), simulates it (`company.Company`), writes its tables (`tables`), the
identities between their figures (`identities`) and the body with its prose (`sections`) into a
`ledger.Ledger`, keeps what the body prints (tables it leaves out, their figures and the
identities that need them go), and alters one figure if `Spec.tamper` says so (`tamper`).
`report(spec)` is the same report cached per process (`memo`): whichever process needs a report
(the rollout worker's tools, the verifier, SFT) rebuilds it from its Spec.

The types a report is made of are `report`'s; laying it out in pages is `layout`'s.
"""

from __future__ import annotations

import random
import threading
from collections import OrderedDict
from typing import Callable

from tempering.tasks.finance import identities, sections, tables, words
from tempering.tasks.finance.company import Company
from tempering.tasks.finance.ledger import Ledger
from tempering.tasks.finance.report import SIZES, Report, Spec, Table
from tempering.tasks.finance.tamper import tamper


def generate(spec: Spec) -> Report:
    rng = random.Random(f"tempering-finance/{spec.seed}/{spec.size}")
    size = SIZES[spec.size]
    n = rng.randint(*size["years"])
    last = rng.randint(2016, 2025)
    years = tuple(range(last - n + 1, last + 1))
    unit = rng.choice(("thousands", "millions"))
    company = words.company_name(rng)
    segments = tuple(rng.sample(words.SEGMENTS, rng.randint(*size["segments"])))
    n_regions = rng.randint(*size["regions"])
    regions = words.REGIONS_SHORT if n_regions == 3 else tuple(rng.sample(words.REGIONS_LONG, n_regions))
    sim = Company(rng, n, len(segments), len(regions), unit, years[0])
    lg = Ledger(unit)
    q_years = years if not size["quarters"] else years[-size["quarters"]:]
    named, quarterly, shown = tables.write(lg, sim, years, segments, regions, q_years)
    identities.write(lg, years, len(segments), len(regions), len(shown), q_years, len(tables.PPE_CLASSES))
    body = sections.write(lg, rng, size, company, unit, years, segments, named, quarterly)
    # only what the report prints: the figures of tables it leaves out, and their identities, go
    shown_tables = {block.key for block in body if isinstance(block, Table)}
    kept = {k: v for k, v in lg.tables.items() if k in shown_tables}
    cells = {k: v for k, v in lg.cells.items() if k[0] in shown_tables or k[0] == "prose"}
    idents = tuple(i for i in lg.identities if all(k in cells for _, k in i.terms))
    report = Report(spec, company, unit, years, segments, regions, tuple(body), kept, cells, idents)
    if spec.tamper:
        tamper(report)
    return report


def memo(maxsize: int) -> Callable:
    """An LRU cache whose computation runs under a lock: concurrent callers of one key wait for
    the first instead of rendering the same report twice."""

    def wrap(fn: Callable) -> Callable:
        cache: OrderedDict = OrderedDict()
        lock = threading.RLock()

        def cached(*args):
            with lock:
                if args in cache:
                    cache.move_to_end(args)
                    return cache[args]
                value = fn(*args)
                cache[args] = value
                while len(cache) > maxsize:
                    cache.popitem(last=False)
                return value

        cached.cache = cache  # type: ignore[attr-defined]
        cached.__wrapped__ = fn  # type: ignore[attr-defined]
        cached.__doc__ = fn.__doc__
        return cached

    return wrap


@memo(32)
def report(spec: Spec) -> Report:
    """The report of `spec` (generated once per process; treat it as read-only)."""
    return generate(spec)


__all__ = ["generate", "memo", "report"]
