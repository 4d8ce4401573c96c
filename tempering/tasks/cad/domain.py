"""The `cad/<kind>` domains: one per part kind, each a generator of seeded parts.

A task's prompt is the part's design intent and coordinate frame; `ref` ("KIND:SEED") is how any
process rebuilds the part and its target mesh (`parts.part`, `parts.target`); the mesh and the
construction program are never in the task's text, only in its SFT `reference` (the program as
compact tool calls, one per assistant turn, then `submit`). An episode acts on a `Scene` of its
own (`open_host`) with the modelling tools (`scene.TOOLS`); the verifier (`reward.verify`) runs in
a killable process, since mesh booleans can be slow. For reward models and judges, every domain
carries the design-intent criteria (`grading.RUBRIC`) and `grading.grade_item`: the intent, and
the submitted solid's measurements and silhouettes as the answer.
"""

from __future__ import annotations

import functools
import random
import string

from tempering.records import Budget, Task
from tempering.tasks.cad.grading import RUBRIC, grade_item
from tempering.tasks.cad.parts import KINDS, part
from tempering.tasks.cad.reward import verify
from tempering.tasks.cad.scene import TOOLS, Scene
from tempering.tasks.domain import Domain

TOOL_NAMES = tuple(TOOLS)
BUDGET = Budget(max_turns=40, max_tokens=4096, wall_s=300.0)
# Prompts, programs and tool results are plain ASCII: the demo's character tokenizer covers them.
ALPHABET = string.ascii_letters + string.digits + string.punctuation + " \n"


def make_task(kind: str, rng: random.Random) -> Task:
    seed = rng.randrange(2**31)
    p = part(kind, seed)
    return Task(id="", domain=f"cad/{kind}", prompt=p.prompt, ref=f"{kind}:{seed}", tools=TOOL_NAMES,
                reference=p.reference, budget=BUDGET)


def open_scene(task: Task) -> Scene:
    return Scene()


DOMAINS = tuple(
    Domain(f"cad/{kind}", f"3D modelling: {about}, from its design intent (mesh IoU against the target)",
           verify, make=functools.partial(make_task, kind), tools=TOOLS, open_host=open_scene, heavy=True,
           alphabet=ALPHABET, rubric=RUBRIC, grade_item=grade_item)
    for kind, (_, about) in KINDS.items())
