#!/usr/bin/env bash
# The test suite on a fresh machine: set up, then pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# The dashboard's browser tests drive Debian's chromium (Playwright's own browser download
# cannot work offline).
if ! command -v chromium >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium
fi
# Two workers, each taking whole files (a file's session fixtures run once): 17.8 -> 12.4 min on a
# 2-core machine. TEST_WORKERS=0 runs in this process (as `-n 0` among the arguments does).
exec .venv/bin/python -m pytest -n "${TEST_WORKERS:-2}" --dist loadfile "$@"
