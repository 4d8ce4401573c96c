"""Process components of an episode's reward, from what its tool calls did (telemetry).

`turns_left`: the share of the task's turn budget left unused (an agent that gets there in fewer
turns scores higher); `valid_calls`: the share of its tool calls that were well-formed, allowed
and succeeded; `sandbox_time`: the share of the task's sandbox CPU budget left unused. Each is in
[0, 1]. They are components like the verifiers' outcome: config weights them per domain (a
component without a weight is logged, not rewarded). Single-turn samples have none.
"""

from __future__ import annotations

from tempering.records import Task, Trajectory


def process_components(task: Task, sample: Trajectory) -> dict[str, float]:
    if not sample.turns:
        return {}
    calls = sample.tool_calls
    turns = sum(t.role == "assistant" for t in sample.turns)
    cpu = sum(c.result.cpu_s for c in calls if c.result is not None)
    return {
        "turns_left": max(0.0, 1.0 - turns / max(task.budget.max_turns, 1)),
        "valid_calls": 1.0 - sum(c.failed for c in calls) / len(calls) if calls else 1.0,
        "sandbox_time": max(0.0, 1.0 - cpu / task.budget.cpu_s),
    }
