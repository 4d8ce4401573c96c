"""The junk audit over every reasoning-gym domain: for each dataset and several seeds, the oracle
answer must score 1.0 and junk (empty, "0", random text, the question copied back, long lists of
numbers, empty JSON, empty answer tags) must score 0, through the domain's own grading (answer
tags, guards, scorer, fixes, math-verify). CI runs the same audit with fewer seeds
(tests/reasoning). Prints one JSON object: the datasets that passed, those that failed and how,
the fixed scorers (why, and what the wrapper does), the excluded datasets with reasons, the
number of checks and the seconds.
Usage: python bench/reasoning_audit.py [--seeds N] [DATASET ...]
"""

from __future__ import annotations

import sys

from tempering.tasks.reasoning import audit

if __name__ == "__main__":
    sys.exit(audit.main(sys.argv[1:]))
