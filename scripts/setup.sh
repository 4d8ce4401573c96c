#!/usr/bin/env bash
# Set up a fresh machine for Tempering: system packages, a virtual environment in .venv, the
# CPU build of torch, and the package with its test extras. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)   # the isolated sandbox
command -v prlimit >/dev/null 2>&1 || need_apt+=(util-linux)
# the engine's CPU kernels (engine/paged_decode.c, engine/sampler.c) are built on first use;
# without a compiler the engine still runs, in PyTorch (slower)
command -v cc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# Pin torch first: on these CPU machines this takes the local CPU wheel; a bare "torch" could
# pull a multi-GB CUDA build. Elsewhere, TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# picks PyTorch's CPU wheels.
.venv/bin/python -m pip install -q ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[test,ray]"  # ray: the Ray runtime's tests run in CI too
# The Debian packages the sandbox offers task folders (tempering/sandbox/toolchain/debian.py).
tc_apt=$(.venv/bin/python -m tempering.sandbox.toolchain.debian)
if [ -n "$tc_apt" ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $tc_apt; } \
    || echo "setup: could not install $tc_apt; Harbor tasks that need them will be skipped" >&2
fi
# Built into the cache, outside the checkout (TEMPERING_CACHE; /var/cache/tempering for root,
# ~/.cache/tempering otherwise), where the sandbox's unprivileged user can read it.
# The sandbox's read-only toolchain (pytest and installer shims for task folders). Offline, an
# earlier build is kept (refreshed); without one, tasks that need it are skipped.
.venv/bin/python -m tempering.sandbox.toolchain.build \
  || echo "setup: the sandbox toolchain was not built (offline?); Harbor tasks that need pytest will be skipped" >&2
# The generated terminal tasks: their upstream libraries fetched from PyPI (pinned by sha256 in
# data/terminal/libraries.lock.toml), verified and mutated. Offline with a cold cache: one line,
# and those tasks are left out.
.venv/bin/python -m tempering.tasks.terminal build --offline-ok
