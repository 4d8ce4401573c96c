"""Where the terminal tasks' data lives: outside the importable package, which carries only code.

The data folder holds the hand-written task folders (`tasks/<name>/`), the generated tasks'
mutations (`mutations.jsonl`) and the lock of the upstream libraries they mutate
(`libraries.lock.toml`). It is `TEMPERING_TERMINAL_DATA` when set, else `data/terminal` at the
root of the checkout the package runs from (an editable install or a clone on PYTHONPATH). A
wheel installed elsewhere has no such folder: `root()` then raises DataMissing saying how to
point at one. What is built from the data (the upstream sources, the generated folders) lives
in the cache (`upstream`), not here.
"""

from __future__ import annotations

import os
from pathlib import Path

from tempering.errors import UserError

ENV = "TEMPERING_TERMINAL_DATA"
_CHECKOUT = Path(__file__).resolve().parents[3] / "data" / "terminal"  # <checkout>/data/terminal


class DataMissing(UserError):
    """No terminal task data where it was looked for; the message says where and how to fix it."""


def root() -> Path:
    if os.environ.get(ENV):
        path = Path(os.environ[ENV]).expanduser()
        if not (path / "tasks").is_dir():
            raise DataMissing(f"{ENV}={path}: not a terminal task data folder (it has no tasks/)")
        return path
    if not _CHECKOUT.is_dir():
        raise DataMissing(f"no terminal task data at {_CHECKOUT} (the package is installed without a "
                          f"checkout): set {ENV} to the data/terminal folder of a Tempering checkout")
    return _CHECKOUT


def hand_written_dir() -> Path:
    return root() / "tasks"


def mutations_file() -> Path:
    return root() / "mutations.jsonl"


def lock_file() -> Path:
    return root() / "libraries.lock.toml"
