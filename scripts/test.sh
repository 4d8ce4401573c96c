#!/usr/bin/env bash
# The test suite on a fresh machine: set up, then pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
