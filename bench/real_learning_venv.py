"""The TRL arm's own virtual environment for bench/real_learning.py (TRL is no dependency of Tempering).

Made once under the cache (`tempering.cache.folder("bench-trl")/venv-trl-<TRL>`) with pinned TRL,
PEFT, transformers and accelerate, torch 2.13.0 (the CPU wheel, as the main venv has it) and
Tempering's own dependencies read from pyproject.toml; Tempering itself is not installed: the
TRL worker imports it from this checkout (PYTHONPATH), so its reward calls the same verifiers.
A `ready` file marks a finished install; a half-made venv is made again. `torch==2.13.0` comes
from wherever pip finds it, as for the main venv: this machine's find-links hold the CPU wheel
(elsewhere, point PIP_INDEX_URL or PIP_FIND_LINKS at a CPU build first).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PINS = ("trl==1.16.0", "peft==0.22.0", "transformers==5.25.0", "accelerate==1.16.0", "torch==2.13.0")


def trl_python() -> Path:
    """The TRL venv's python, made (minutes, once) if it is not there."""
    from tempering.cache import folder

    venv = folder("bench-trl") / f"venv-{PINS[0].replace('==', '-')}"
    python, ready = venv / "bin" / "python", venv / "ready"
    if ready.exists() and ready.read_text() == " ".join(PINS):
        return python
    print(f"[bench/real_learning] making the TRL venv {venv} (once)", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    subprocess.run([str(python), "-m", "pip", "install", "-q", *PINS, *deps], check=True)
    ready.write_text(" ".join(PINS))
    return python


if __name__ == "__main__":
    print(trl_python())
