#!/usr/bin/env bash
# A short run with a reward-model component: set up, train the demo reward model (about half a
# minute), then SFT + GRPO on sorting and strings with `rm_quality` in the reward.
# Extra arguments are config overrides, e.g. ./scripts/demo_rm.sh --run.steps=50
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/tempering train-rm --data demo --out runs/rm-demo
exec .venv/bin/tempering train --config configs/demo_rm.toml "$@"
