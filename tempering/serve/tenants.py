"""Tenants of `tempering serve`: who a request comes from, and whether it may come now.

`Tenants` maps API keys to tenants: keys given with `--api-key` (or TEMPERING_API_KEY) belong
to the tenant "default", a keys file (TOML, one `"<key>" = "<tenant>"` line each) names the
tenant of each of its keys. With no key at all the server is open and every request is the
default tenant's; with any key, a request without a valid `Authorization: Bearer <key>` is
refused (401). A tenant's priority, share and rate limit come from `[serve.tenants.<name>]`
(defaults for a tenant named only by keys). Keys are kept as SHA-256 digests and never printed.
`RateLimiter` holds a token bucket per tenant: `admit` says how long until a request would be
allowed (0: it is, and its token is taken). Neither queues nor schedules anything.
"""

from __future__ import annotations

import hashlib
import math
import os
import threading
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from tempering.config import ServeConfig, TenantConfig
from tempering.config.serve import TENANT_NAME
from tempering.errors import UserError

DEFAULT = "default"
KEY_ENV = "TEMPERING_API_KEY"


@dataclass(frozen=True)
class Tenant:
    name: str
    priority: int = 0
    share: float = 1.0
    requests_per_s: float = 0.0  # 0: unlimited
    burst: int = 1


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class Tenants:
    def __init__(self, configs: Mapping[str, TenantConfig], keys: Mapping[str, str]):
        """`keys`: API key -> tenant name."""
        self._by_name = {name: _tenant(name, c) for name, c in configs.items()}
        self._keys = {_digest(k): name for k, name in keys.items()}
        for name in set(self._keys.values()) | {DEFAULT}:
            self._by_name.setdefault(name, _tenant(name, TenantConfig()))

    @classmethod
    def load(cls, cfg: ServeConfig, api_keys: Sequence[str] = (), keys_file: str | None = None) -> "Tenants":
        keys = {k: DEFAULT for k in api_keys if k}
        if not api_keys and os.environ.get(KEY_ENV):
            keys[os.environ[KEY_ENV]] = DEFAULT
        if keys_file:
            keys.update(read_keys_file(Path(keys_file)))
        return cls(cfg.tenants, keys)

    @property
    def open(self) -> bool:
        """No key is set: every request is the default tenant's."""
        return not self._keys

    def authenticate(self, authorization: str | None) -> Tenant | None:
        """The tenant of an `Authorization` header's bearer key; None when the key is missing or
        unknown and the server has keys."""
        if self.open:
            return self._by_name[DEFAULT]
        scheme, _, key = (authorization or "").partition(" ")
        name = self._keys.get(_digest(key.strip())) if scheme.lower() == "bearer" else None
        return self._by_name[name] if name is not None else None

    def get(self, name: str) -> Tenant:
        return self._by_name[name]

    def all(self) -> list[Tenant]:
        return sorted(self._by_name.values(), key=lambda t: t.name)


def _tenant(name: str, c: TenantConfig) -> Tenant:
    burst = c.burst or max(1, math.ceil(c.requests_per_s))
    return Tenant(name, c.priority, c.share, c.requests_per_s, burst)


def read_keys_file(path: Path) -> dict[str, str]:
    """A keys file: TOML of `"<key>" = "<tenant name>"`. Errors name the line's tenant or a key's
    first characters only."""
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: no such keys file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not valid TOML: {e}") from None
    out = {}
    for key, name in raw.items():
        shown = f"{key[:4]}..." if len(key) > 4 else "(a short key)"
        if not isinstance(name, str) or TENANT_NAME.fullmatch(name) is None:
            raise UserError(f"{path}: key {shown}: expected a tenant name (letters, digits, '.', '_', '-'), got {name!r}")
        if len(key) < 8:
            raise UserError(f"{path}: key {shown} of tenant {name}: keys must have at least 8 characters")
        out[key] = name
    return out


class RateLimiter:
    """A token bucket per tenant: `burst` tokens, refilled at `requests_per_s`. Thread-safe."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}  # tenant -> (tokens, at)
        self._lock = threading.Lock()

    def admit(self, tenant: Tenant, now: float | None = None) -> float:
        """0 when `tenant` may send a request now (its token is taken), else the seconds until it may."""
        if tenant.requests_per_s <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        with self._lock:
            tokens, at = self._buckets.get(tenant.name, (float(tenant.burst), now))
            tokens = min(float(tenant.burst), tokens + (now - at) * tenant.requests_per_s)
            if tokens >= 1.0:
                self._buckets[tenant.name] = (tokens - 1.0, now)
                return 0.0
            self._buckets[tenant.name] = (tokens, now)
            return (1.0 - tokens) / tenant.requests_per_s
