#!/usr/bin/env bash
# The demo on a fresh machine: set up, then SFT warm-up + asynchronous GRPO on the demo mix.
# Extra arguments are config overrides, e.g. ./scripts/demo.sh --run.steps=100
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/tempering train --config configs/demo.toml "$@"
