"""Files: sort the digits stored in one of the workspace's files, which only a tool can read.

The demo's multi-turn domain. The prompt names a file (`sort @c=`); the digits are in the
episode's workspace, never in the prompt, so an answer takes two model turns at least: a call
of the `read` tool (`$read c`, in the compact tool format), then the sorted digits after the
tool's result (`>4721`). Other files hold distractors. Checked by `exact_answer` on the last
turn; no code runs, so no sandbox starts for it.
"""

from __future__ import annotations

import random

from tempering.records import Budget, Environment, Task
from tempering.tasks.answers import exact_answer
from tempering.tasks.domain import Domain

NAMES = "abcdefgh"


def _make(rng: random.Random) -> Task:
    names = rng.sample(NAMES, 3)
    files = {n: "".join(str(rng.randint(0, 9)) for _ in range(rng.randint(4, 5))) for n in names}
    target = rng.choice(names)
    answer = "".join(sorted(files[target]))
    return Task(id="", domain="files", prompt=f"sort @{target}=", answer=answer,
                tools=("read",), environment=Environment(files=tuple(sorted(files.items()))),
                reference=(f"$read {target}", answer), budget=Budget(max_turns=3, max_tokens=16))


# The alphabet covers the compact tool format too: the call ("$read c") and its result (">4721\n").
DOMAIN = Domain("files", "sort the digits of a workspace file, read with a tool (multi-turn)", exact_answer,
                make=_make, alphabet="0123456789sort @=$read>\n" + NAMES)
