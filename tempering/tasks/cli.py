"""`tempering tasks ...`: the domains from the shell.

    tempering tasks [list]                          every domain, one per line, with its family
    tempering tasks [show] DOMAIN [--count N]       a few tasks of a domain (with their answers)
    tempering tasks sample DOMAIN --seed N [--json] [--with-answer]
    tempering tasks score DOMAIN --seed N --answer-file FILE [--json]
    tempering tasks check [DOMAIN|FAMILY ...] [--per-domain N] [--seed S] [--json]

Each takes `--config FILE` and `--plugin MODULE` (repeatable): the domains are the built-in ones,
the installed entry points, the config's `tasks.plugins` and the `--plugin` modules, loaded as
`tempering train` loads them; `score` and `check` use the config's `[sandbox]` (and `score` its
`[reward]`).

`sample` prints one task as the model sees it (prompt, messages, tools, workspace files); its
hidden answer only with --with-answer. `score` gives the reward of an answer to that task as
training computes it (components, weights, total, reason): FILE holds the final answer, or JSON
`{"turns": [...]}` for an episode of several turns (tool calls in the compact format run for
real); it exits 0 when scoring completed, whatever the reward. `check` plays, for tasks of each
selected domain, the oracle (the task's reference, or its domain's own check), an empty answer
and junk answers, and exits 1 naming every task where the oracle did not score 1 or anything
else did not score 0. Harbor folders have their own actions (`run-folder`, `import`, and
`check terminal` for the shipped terminal tasks): `tempering.tasks.harbor.cli`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from tempering.config import Config, SandboxConfig, load_config
from tempering.errors import UserError
from tempering.tasks import domains, get_domain, load_plugins
from tempering.tasks.check import check_task, draw, reward_service, score_turns, tokenizer_for

ACTIONS = ("list", "show", "sample", "score", "check")


def main(argv: list[str]) -> int:
    """`argv` starts with the action (or is empty: list; or a domain's name: show it)."""
    if argv and argv[0] not in ACTIONS and not argv[0].startswith("-"):
        argv = ["show", *argv]
    elif not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["list", *argv]
    parser = argparse.ArgumentParser(prog="tempering tasks", description=__doc__.splitlines()[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help="a TOML config: its tasks.plugins are loaded, its [sandbox] (and for "
                        "score its [reward]) apply")
    common.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                        help="import MODULE for its domains, as tasks.plugins does (repeatable)")
    sub = parser.add_subparsers(dest="action")
    sub.add_parser("list", parents=[common], help="every domain, one per line, with its family")
    p = sub.add_parser("show", parents=[common], help="a few tasks of a domain, answers included")
    p.add_argument("domain")
    p.add_argument("--count", type=int, default=3)
    p = sub.add_parser("sample", parents=[common], help="one task as the model sees it")
    p.add_argument("domain")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--json", action="store_true")
    p.add_argument("--with-answer", action="store_true", help="also print the hidden answer and reference")
    p = sub.add_parser("score", parents=[common], help="the reward of an answer to a task, as training computes it")
    p.add_argument("domain")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--answer-file", required=True, help="the final answer, or JSON {\"turns\": [...]}")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("check", parents=[common], help="oracles score 1, no-op and junk answers 0")
    p.add_argument("names", nargs="*", metavar="DOMAIN|FAMILY", help="default: every domain")
    p.add_argument("--per-domain", type=int, default=2, help="tasks checked per domain")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    cfg = load_config(args.config)
    load_plugins((*cfg.tasks.plugins, *args.plugin))
    return {"list": _list, "show": _show, "sample": _sample, "score": _score, "check": _check}[args.action](args, cfg)


def _list(args: argparse.Namespace, cfg: Config) -> int:
    for name, d in sorted(domains().items()):
        print(f"{name:40s} {d.family:12s} {d.description}")
    return 0


def _show(args: argparse.Namespace, cfg: Config) -> int:
    for task in draw(get_domain(args.domain), args.count, 0):
        print(json.dumps(_visible(task) | _hidden(task)))
    return 0


def _sample(args: argparse.Namespace, cfg: Config) -> int:
    (task,) = draw(get_domain(args.domain), 1, args.seed)
    out = _visible(task) | (_hidden(task) if args.with_answer else {})
    if args.json:
        print(json.dumps(out))
    else:
        print(task.prompt if not task.messages else "\n\n".join(f"[{m.role}]\n{m.content}" for m in task.messages))
        if task.tools:
            print(f"\n[tools] {', '.join(task.tools)}")
        if args.with_answer:
            print(f"\n[answer] {task.answer}\n[reference] {json.dumps(task.reference)}")
    return 0


def _visible(task) -> dict:
    env = task.environment
    return {"domain": task.domain, "id": task.id, "prompt": task.prompt,
            "messages": [dataclasses.asdict(m) for m in task.messages], "tools": list(task.tools),
            "workspace": None if env is None else {"workdir": env.workdir, "files": [n for n, _ in env.files],
                                                   "folder": env.folder or None},
            "budget": dataclasses.asdict(task.budget)}


def _hidden(task) -> dict:
    return {"answer": task.answer, "ref": task.ref, "reference": task.reference}


def _sandbox_for(names, cfg: SandboxConfig = SandboxConfig()) -> object:
    from tempering.sandbox import make_sandbox

    if any(get_domain(n).sandbox for n in names):
        return make_sandbox(dataclasses.replace(cfg, workers=2))
    return None


def _score(args: argparse.Namespace, cfg: Config) -> int:
    from tempering.rollout.environment import Environments

    domain = get_domain(args.domain)
    (task,) = draw(domain, 1, args.seed)
    path = Path(args.answer_file)
    if not path.is_file():
        raise UserError(f"--answer-file {path}: no such file")
    text = path.read_text(encoding="utf-8")
    turns = [text]
    if text.lstrip().startswith("{"):
        try:
            turns = list(json.loads(text)["turns"])
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise UserError(f"--answer-file {path}: JSON answers look like {{\"turns\": [...]}} ({e})") from None
    tokenizer = tokenizer_for([task, dataclasses.replace(task, prompt="".join(turns))])
    sandbox = _sandbox_for([domain.name], cfg.sandbox)
    reward = reward_service(tokenizer, sandbox, cfg.reward)
    try:
        r, trajectory = score_turns(task, turns, reward, Environments(sandbox), tokenizer)
    finally:
        reward.close()
        if sandbox is not None:
            sandbox.close()
    out = {"domain": task.domain, "task": task.id, "total": r.total, "components": dict(r.components),
           "weights": dict(r.weights), "reason": r.reason, "failed": r.failed,
           "finish_reason": trajectory.finish_reason}
    print(json.dumps(out) if args.json else f"{task.id}: total {r.total:.3f} {dict(r.components)} ({r.reason})")
    return 1 if r.failed else 0


def _check(args: argparse.Namespace, cfg: Config) -> int:
    from tempering.rollout.environment import Environments

    known = domains()
    names = sorted({n for key in args.names or [d.family for d in known.values()] for n in _select(key, known)})
    tasks = {n: draw(known[n], args.per_domain, args.seed) for n in names}
    tokenizer = tokenizer_for([t for ts in tasks.values() for t in ts])
    sandbox = _sandbox_for(names, cfg.sandbox)
    reward = reward_service(tokenizer, sandbox)
    envs, bad = Environments(sandbox), 0
    try:
        for name in names:
            for task in tasks[name]:
                row = check_task(known[name], task, reward, envs, tokenizer, args.seed)
                bad += not row.ok
                if args.json:
                    print(json.dumps(dataclasses.asdict(row) | {"ok": row.ok}), flush=True)
                else:
                    print(f"{'ok  ' if row.ok else 'FAIL'}  {task.id}  oracle {row.oracle}"
                          f"{'' if row.ok else '  ' + '; '.join(row.failures)}", flush=True)
    finally:
        reward.close()
        if sandbox is not None:
            sandbox.close()
    total = sum(len(ts) for ts in tasks.values())
    print(f"{total - bad} of {total} tasks of {len(names)} domains: oracle 1, no-op and junk 0", file=sys.stderr)
    return 1 if bad else 0


def _select(key: str, known: dict) -> list[str]:
    if key in known:
        return [key]
    family = [n for n, d in known.items() if d.family == key]
    if not family:
        raise UserError(f"tasks check: {key!r} is neither a domain nor a family (`tempering tasks list`)")
    return family
