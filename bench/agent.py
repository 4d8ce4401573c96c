"""Agent episodes on the shipped terminal tasks: pipelined (the EpisodeRunner) against a
strict-phase rollout (every sample's turn generated, then every tool call run, ..., then every
sample verified), in the same run on the same tasks.

The policy is scripted on top of a real engine: a tiny random model generates each turn (its
tokens and their cost are real; a turn ends when it samples one of a fixed share of the
vocabulary, so turn lengths vary), and the turn's action is chosen from a fixed script by a hash
of the generated text: `submit` with probability 1/4, else one of a few shell commands (listing
files, grepping, a little CPU work, the workspace's own tests, a wait whose length is heavy-
tailed, as a slow build or a test with timeouts would be). Commands run in real sandbox
sessions; verification runs each task's hidden tests in a fresh sandbox. Episode lengths and
command durations vary, as they do in RL. Environments are set up once, before timing.

Prints one JSON object: episodes per second for both, their ratio, where the time went
(generation = engine steps; tools and verification = the seconds of those calls, which overlap
generation when pipelined), and how many sandbox jobs ran and their wall time.
Usage: python bench/agent.py [--tasks 6] [--samples 8] [--turns 6] [--turn-tokens 24]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import hashlib
import json
import os
import random
import string
import tempfile
import time
from pathlib import Path

import torch

from tempering.agent.format import tool_format
from tempering.agent.tools import execute
from tempering.config import RewardConfig, SandboxConfig
from tempering.engine import LLM, SamplingParams
from tempering.models import Arch, build_model
from tempering.records import Group, ToolCall
from tempering.reward import RewardService, Submission
from tempering.rollout import Episode, EpisodeRunner
from tempering.rollout.environment import Environments
from tempering.rollout.group_key import GroupKey
from tempering.sandbox import make_sandbox
from tempering.tasks import get_domain
from tempering.tasks.terminal import domain as terminal
from tempering.tokenizer import char_tokenizer

COMMANDS = ["ls -la", "grep -rn 'def ' --include=*.py . | head -20",
            "python3 -c 'print(sum(i * i for i in range(300000)))'",
            "python3 -m pytest -q -x -p no:cacheprovider 2>&1 | tail -3",
            "sleep {wait}"]  # a command that waits (a slow build, a test with timeouts): heavy-tailed
WAITS = [0.05] * 6 + [0.2, 0.2, 0.5, 2.0]  # seconds; one wait in ten is 2 s


def scripted(text: str) -> list[ToolCall]:
    """The action for a generated turn: a deterministic function of its text."""
    h = int(hashlib.sha256(text.encode()).hexdigest(), 16)
    if h % 4 == 0:
        return [ToolCall("submit", {})]
    command = COMMANDS[(h // 4) % len(COMMANDS)].format(wait=WAITS[(h // 64) % len(WAITS)])
    return [ToolCall("run", {"command": command})]


def setup(args):
    tok = char_tokenizer(string.printable)
    arch = Arch(vocab_size=tok.vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192)
    model = build_model(arch, seed=0).eval()
    sandbox = make_sandbox(SandboxConfig(workers=4), log_dir=args.log_dir)
    names = sorted(random.Random(args.seed).sample(terminal.runnable(), args.tasks))
    tasks = []
    for i, name in enumerate(names):
        t = get_domain("terminal").make(random.Random(name))  # a fixed draw; re-point it at `name`
        t = dataclasses.replace(t, id=f"terminal-{i}", environment=dataclasses.replace(
            t.environment, folder=str(terminal.folder(name))),
            budget=dataclasses.replace(t.budget, max_turns=args.turns, max_tokens=args.turns * args.turn_tokens * 4))
        tasks.append(t)
    envs = Environments(sandbox)
    for t in tasks:  # set up every environment now: both modes start from warm set-ups
        for host in envs.open(t, 1, GroupKey("bench")):
            envs.close(host)
    # a turn ends when the model samples one of these: about turn_tokens tokens per turn
    stops = tuple(range(max(1, tok.vocab_size // args.turn_tokens)))
    # Seeded: each sample draws from its own generator, so both modes generate the same episodes
    # (the runner's first turn uses seed + sample index, its later turns the seed itself).
    params = SamplingParams(n=args.samples, temperature=1.0, max_tokens=args.turns * args.turn_tokens * 4,
                            stop_token_ids=stops, seed=args.seed)
    return tok, model, sandbox, envs, tasks, params


def pipelined(tok, model, sandbox, envs, tasks, params, args) -> dict:
    reward = RewardService(RewardConfig(workers=4), tok, sandbox)
    fmt = tool_format("compact", tok)
    runner = EpisodeRunner(LLM(model, tok, max_seq_len=8192, max_batch_size=64), tok, reward, scripted,
                           fmt.renderer, envs.open, envs.close, workers=4)
    start = time.perf_counter()
    groups = runner.run(tasks, args.samples, params, params.max_tokens)
    wall = time.perf_counter() - start
    runner.close()
    reward.close()
    return report(groups, wall, {"generate_s": runner.seconds["generate"], "tools_s": runner.seconds["tools"],
                                 "verify_s": runner.seconds["score"], "open_s": runner.seconds["open"]})


def strict(tok, model, sandbox, envs, tasks, params, args) -> dict:
    """Phases: all turns generated, then all tool calls, per turn; then every sample verified."""
    reward = RewardService(RewardConfig(workers=4), tok, sandbox)
    fmt = tool_format("compact", tok)
    engine = LLM(model, tok, max_seq_len=8192, max_batch_size=64)
    pool = cf.ThreadPoolExecutor(4)
    split = {"generate_s": 0.0, "tools_s": 0.0, "verify_s": 0.0, "open_s": 0.0}
    start = time.perf_counter()
    t0 = time.perf_counter()
    hosts = [envs.open(t, args.samples, GroupKey("bench")) for t in tasks]
    split["open_s"] = time.perf_counter() - t0
    episodes = [[Episode(t, i, tok.encode_prompt(t.prompt), params.max_tokens, 8192, scripted, fmt.renderer, h)
                 for i, h in enumerate(hs)] for t, hs in zip(tasks, hosts)]
    live = [ep for group in episodes for ep in group]
    while live:
        t0 = time.perf_counter()
        outs = engine.generate([ep.context for ep in live], [
            dataclasses.replace(params, n=1, max_tokens=ep.next_turn_tokens() or 1,
                                seed=params.seed + (ep.index if not ep.turns else 0)) for ep in live])
        split["generate_s"] += time.perf_counter() - t0
        work = []
        for ep, out in zip(live, outs):
            c = out.outputs[0]
            calls = ep.add_turn(list(c.token_ids), list(c.logprobs), list(c.versions), c.finish_reason,
                                tok.decode(c.token_ids))
            if calls:
                turn = ep.num_assistant_turns - 1
                work.append((ep, pool.submit(lambda e=ep, cs=calls, k=turn: [execute(x, e.task, e.host, k)
                                                                             for x in cs])))
        t0 = time.perf_counter()
        for ep, fut in work:
            ep.add_results(fut.result())
        split["tools_s"] += time.perf_counter() - t0
        live = [ep for ep in live if not ep.done and ep.next_turn_tokens() > 0]
    t0 = time.perf_counter()
    groups = []
    for task, group, hs in zip(tasks, episodes, hosts):
        trajectories = [ep.trajectory("") for ep in group]
        rewards = reward.score([Submission(task, tr, h.final_state(), GroupKey("bench").tag(task, i))
                                for i, (tr, h) in enumerate(zip(trajectories, hs))])
        groups.append(Group(task, trajectories, rewards))
        for h in hs:
            envs.close(h)
    split["verify_s"] = time.perf_counter() - t0
    wall = time.perf_counter() - start
    pool.shutdown()
    reward.close()
    return report(groups, wall, split)


def report(groups: list[Group], wall: float, split: dict) -> dict:
    samples = [t for g in groups for t in g.trajectories]
    calls = [c for t in samples for c in t.tool_calls]
    return {"episodes": len(samples), "wall_s": round(wall, 2), "episodes_per_s": round(len(samples) / wall, 3),
            "turns_per_episode": round(sum(sum(x.role == "assistant" for x in t.turns) or 1 for t in samples)
                                       / len(samples), 2),
            "tool_calls": len(calls), "failed_rewards": sum(r.failed for g in groups for r in g.rewards),
            "seconds": {k: round(v, 2) for k, v in split.items()}}


def sandbox_jobs(log: Path) -> dict:
    """How many sandbox jobs the episodes ran (set-up, commands, verification) and their wall
    time together, from the sandbox's telemetry."""
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    return {"jobs": len(rows), "wall_s": round(sum(r["wall_s"] for r in rows), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=6)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--turn-tokens", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.log_dir = tempfile.mkdtemp(prefix="tempering-bench-agent-")
    torch.set_num_threads(1)
    tok, model, sandbox, envs, tasks, params = setup(args)
    out = {"tasks": [t.environment.folder.rsplit("/", 1)[1] for t in tasks], "samples_per_task": args.samples,
           "loadavg_1m": {"start": round(os.getloadavg()[0], 2)}}
    try:
        torch.manual_seed(0)
        out["strict"] = strict(tok, model, sandbox, envs, tasks, params, args)
        torch.manual_seed(0)
        out["pipelined"] = pipelined(tok, model, sandbox, envs, tasks, params, args)
    finally:
        sandbox.close()
    out["speedup"] = round(out["pipelined"]["episodes_per_s"] / out["strict"]["episodes_per_s"], 2)
    out["sandbox_jobs"] = sandbox_jobs(Path(args.log_dir) / "sandbox.jsonl")
    out["loadavg_1m"]["end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
