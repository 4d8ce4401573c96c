"""The workload of `bench/async.py`: one domain, `longtail`, whose output lengths and check
latencies are heavy-tailed, as RL workloads' are (most answers short and checked at once, a few
long or slow ones that hold up whatever waits for them).

A task is a word over the letters a-h to reverse: `rev hbcad=` -> `dacbh`. Word lengths follow
a Pareto law (x_min 3, shape 1.2) capped at `MAX_LEN`, so the model's answers, which copy the
word's length, are heavy-tailed too: half are 3-5 letters, one in twenty is 30 or more. The
reward is graded (`outcome` for the exact reversal, `partial` for the fraction of positions
that agree), so a small model's reward moves within a minute of RL.

The check runs in the real sandbox: the sample's answer is written into the job's workspace and
the checked program (`sh`: sleep, then print the answer back) runs under the sandbox's limits;
the verifier compares what the sandbox printed with the reversed word. The program sleeps a
lognormal time (median `LATENCY_MEDIAN_S`, log-sd `LATENCY_SIGMA`, capped at `LATENCY_CAP_S`)
drawn from a hash of the task and the sample's index, so every run of the bench meets the same
latencies for the same samples; a sleeping job holds a sandbox slot but no CPU. A failed
sandbox run is an infrastructure failure (never a training signal), as in `tasks.code`.

Loaded as a plugin: `--tasks.plugins=["async_workload"]` with `bench/` on the import path.
"""

from __future__ import annotations

import hashlib
import math
import random
import statistics

from tempering.records import Budget, Task, Trajectory
from tempering.verdict import InfrastructureError, Verdict, VerifierContext
from tempering.sandbox import ExecRequest
from tempering.tasks.answers import agreement, read_answer
from tempering.tasks.domain import Domain

LETTERS = "abcdefgh"
MIN_LEN, MAX_LEN, LEN_SHAPE = 3, 40, 1.2
LATENCY_MEDIAN_S, LATENCY_SIGMA, LATENCY_CAP_S = 0.12, 1.4, 4.0


def word_length(rng: random.Random) -> int:
    """Pareto(MIN_LEN, LEN_SHAPE), capped at MAX_LEN."""
    return min(MAX_LEN, int(MIN_LEN / (1.0 - rng.random()) ** (1.0 / LEN_SHAPE)))


def _make(rng: random.Random) -> Task:
    word = "".join(rng.choice(LETTERS) for _ in range(word_length(rng)))
    return Task(id="", domain="longtail", prompt=f"rev {word}=", answer=word[::-1], reference=word[::-1],
                budget=Budget(max_tokens=MAX_LEN + 1))


def latency(task_id: str, sample_index: int) -> float:
    """Seconds the check of this sample sleeps: lognormal, capped, the same in every run."""
    digest = hashlib.sha256(f"{task_id}|{sample_index}".encode()).digest()
    u = (int.from_bytes(digest[:8], "big") + 0.5) / 2**64  # uniform in (0, 1)
    z = statistics.NormalDist().inv_cdf(u)
    return min(LATENCY_CAP_S, LATENCY_MEDIAN_S * math.exp(LATENCY_SIGMA * z))


def check(task: Task, sample: Trajectory, ctx: VerifierContext) -> Verdict:
    """Run the checked program in the sandbox (it sleeps, then prints the answer back); what it
    printed is graded (`grade`)."""
    if ctx.sandbox is None:
        raise InfrastructureError("longtail needs a sandbox and none was given")
    answer = read_answer(sample, ctx)
    result = ctx.sandbox.run(ExecRequest(
        command=("/bin/sh", "-c", f"sleep {latency(task.id, sample.sample_index):.3f}; cat answer.txt"),
        files={"answer.txt": answer.text.strip().encode()}, tag=ctx.tag))
    if not result.ok:  # the program cannot fail: anything but ok is the sandbox's fault
        raise InfrastructureError(f"sandbox: {result.reason.value} {result.error}")
    return grade(task, result.stdout.strip(), answer.problem)


def grade(task: Task, got: str, problem: str = "") -> Verdict:
    """`got` must be the reversed word (`outcome`), with positional partial credit (`partial`);
    an answer with a `problem` (cut off, a special token inside) gets partial credit only."""
    if not got:
        return Verdict({"outcome": 0.0, "partial": 0.0}, "empty answer")
    partial = agreement(got, task.answer)
    if problem:
        return Verdict({"outcome": 0.0, "partial": partial}, problem)
    return Verdict({"outcome": float(got == task.answer), "partial": partial},
                   "correct" if got == task.answer else "wrong answer")


DOMAIN = Domain("longtail", "reverse a word of heavy-tailed length; checked in the sandbox with a heavy-tailed "
                "latency", check, make=_make, alphabet=LETTERS + "rev =", sandbox=True)
