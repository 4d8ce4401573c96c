"""The registry: every domain by name, from the package, from plugins, and the weights of a mix.

Built-in domains come from the modules in `BUILTIN`; others from installed packages that declare
an entry point in the group `tempering.domains`, and from modules named in `tasks.plugins`
(`load_plugins`, which every process that builds a task pool calls, spawned workers included).
A module or entry point offers `DOMAINS` (domains) or `domains()` (a function returning them), or
`DOMAIN`. `resolve_weights` turns a mix given by domain, family or glob into a weight per domain.
"""

from __future__ import annotations

import fnmatch
import importlib
import importlib.metadata
from typing import Iterable, Mapping, Sequence

from tempering.errors import UserError
from tempering.tasks.domain import Domain

BUILTIN = ("tempering.tasks.arithmetic", "tempering.tasks.code", "tempering.tasks.files", "tempering.tasks.sorting",
           "tempering.tasks.strings", "tempering.tasks.terminal.domain",
           "tempering.tasks.cad", "tempering.tasks.reasoning", "tempering.tasks.finance")
ENTRY_POINTS = "tempering.domains"

_DOMAINS: dict[str, Domain] = {}
_loaded: set[str] = set()  # modules and entry points already registered


def register(domains: Iterable[Domain], source: str = "") -> None:
    """Add `domains`; a name taken by another domain is an error naming both sources."""
    for d in domains:
        if not isinstance(d, Domain):
            raise UserError(f"{source or 'register'}: {d!r} is not a tempering Domain")
        old = _DOMAINS.get(d.name)
        if old is not None and old is not d:
            raise UserError(f"{source}: domain {d.name!r} is already registered")
        _DOMAINS[d.name] = d


def _offered(obj: object, source: str) -> list[Domain]:
    if isinstance(obj, Domain):
        return [obj]
    if callable(obj) and not hasattr(obj, "DOMAINS") and not hasattr(obj, "DOMAIN"):
        return list(obj())
    for attr in ("DOMAINS", "domains", "DOMAIN"):
        found = getattr(obj, attr, None)
        if found is not None:
            found = found() if callable(found) and attr == "domains" else found
            return [found] if isinstance(found, Domain) else list(found)
    raise UserError(f"{source}: offers no domains (expected DOMAINS, domains() or DOMAIN)")


def load_plugins(modules: Sequence[str] = ()) -> None:
    """Register the built-in domains, the installed entry points and `modules` (once each)."""
    for name in (*BUILTIN, *modules):
        if name not in _loaded:
            try:
                module = importlib.import_module(name)
            except ImportError as e:
                raise UserError(f"tasks.plugins: cannot import {name!r}: {e}") from None
            except ValueError as e:  # a Domain it defines is invalid (its name, make/load, levels)
                if name in BUILTIN:
                    raise
                raise UserError(f"tasks.plugins: {name}: {e}") from None
            register(_offered(module, name), name)
            _loaded.add(name)
    if ENTRY_POINTS in _loaded:
        return
    for ep in importlib.metadata.entry_points(group=ENTRY_POINTS):  # scanned once per process
        key = f"entry point {ep.name} = {ep.value}"
        register(_offered(ep.load(), key), key)
    _loaded.add(ENTRY_POINTS)


def domains() -> dict[str, Domain]:
    """Every registered domain (the built-in ones and the installed plugins at least)."""
    load_plugins()
    return dict(_DOMAINS)


def get_domain(name: str) -> Domain:
    known = domains()
    if name not in known:
        families = sorted({d.family for d in known.values()})
        raise UserError(f"unknown task domain {name!r} (families: {', '.join(families)}; "
                        "`tempering tasks list` lists every domain; a tasks.plugins module's domains need "
                        "--config FILE or --plugin MODULE)")
    return known[name]


def resolve_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """{domain: weight} for a mix whose keys are domain names, family names or globs
    (`reasoning/*`). A family or glob key's weight is shared equally by the domains it matches;
    a domain's own key overrides any family or glob that matches it, and among those the first
    key (in the config's order) wins."""
    known = domains()
    out: dict[str, float] = {}
    exact = {k: w for k, w in weights.items() if k in known}
    for key, w in weights.items():
        if key in exact:
            continue
        matched = matching(key, known, "tasks.weights")
        for name in matched:
            out.setdefault(name, w / len(matched))
    out.update(exact)
    return out


def resolve_scorers(scorers: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """{domain: grader components} for `reward.scorers`, whose keys are domain names, family
    names or globs; a domain matched by several keys gets the names of all of them, once each."""
    known = domains()
    out: dict[str, list[str]] = {}
    for key, names in scorers.items():
        for domain in matching(key, known, "reward.scorers"):
            out.setdefault(domain, [])
            out[domain] += [n for n in names if n not in out[domain]]
    return out


def matching(key: str, known: Mapping[str, Domain], where: str) -> list[str]:
    """The domains `key` names: itself, its family's, or a glob's matches; none is an error."""
    if key in known:
        return [key]
    matched = [n for n in known if known[n].family == key or ("/" not in key and n == key)
               or (any(c in key for c in "*?[") and fnmatch.fnmatchcase(n, key))]
    if not matched:
        families = sorted({d.family for d in known.values()})
        raise UserError(f"{where}.{key}: no domain, family or glob matches it (families: {', '.join(families)})")
    return matched
