#!/bin/bash
cd /app
git bisect start main "$(git rev-list --max-parents=0 main)" >/dev/null
git bisect run python3 check.py >/dev/null
git rev-parse refs/bisect/bad > first_bad_commit.txt
git bisect reset >/dev/null 2>&1
git checkout -q main
