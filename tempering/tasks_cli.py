"""`tempering tasks ...`: the domains from the shell, as one argparse tree.

    tempering tasks [list]                          every domain, one per line, with its family
    tempering tasks show DOMAIN [--count N]         a few tasks of a domain (with their answers)
    tempering tasks sample DOMAIN --seed N [--json] [--with-answer]
    tempering tasks score DOMAIN --seed N (--answer-file FILE | --turns-file FILE) [--json]
    tempering tasks score --answers FILE.jsonl
    tempering tasks check [DOMAIN|FAMILY ...] [--per-domain N] [--seed S] [--json]
    tempering tasks check-shipped terminal | run-folder PATH | import DIR...   (`tasks.harbor.cli`)

The domain actions take `--config FILE` and `--plugin MODULE` (repeatable): the domains are the
built-in ones, the installed entry points, the config's `tasks.plugins` and the `--plugin`
modules, loaded as `tempering train` loads them; `score` and `check` use the config's `[sandbox]`
(and `score` its `[reward]`). `sample` prints one task as the model sees it; its hidden answer
only with --with-answer. `score` gives the reward of an answer as training computes it
(`oracle.Scorer`); `check` plays each task's oracle, a no-op and junk answers and exits 1 naming
every task where the oracle did not score 1 or anything else did not score 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tempering.config import Config, load_config
from tempering.errors import UserError
from tempering.oracle import Scorer, draw
from tempering.records import Task
from tempering.tasks import Domain, domains, get_domain, load_plugins
from tempering.tasks.harbor.cli import add_parsers as add_harbor

Handler = Callable[[argparse.Namespace, Config], int]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `tasks` and its actions on the main CLI's subparsers; the handler is `args.handler`."""
    tasks = subparsers.add_parser("tasks", help="task domains: list, show, sample, score, check; Harbor folders: "
                                  "check-shipped, run-folder, import",
                                  description="Task domains (list, show, sample, score, check) and Harbor task "
                                  "folders (check-shipped, run-folder, import). A bare `tempering tasks` lists.")
    _common(tasks, None)
    tasks.set_defaults(handler=_domains(_list))  # a bare `tempering tasks` lists
    sub = tasks.add_subparsers(dest="action", metavar="ACTION")
    _common(sub.add_parser("list", help="every domain, one per line, with its family"), _list)
    p = _common(sub.add_parser("show", help="a few tasks of a domain, answers included"), _show)
    p.add_argument("domain")
    p.add_argument("--count", type=int, default=3)
    p = _common(sub.add_parser("sample", help="one task as the model sees it"), _sample)
    p.add_argument("domain")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--json", action="store_true")
    p.add_argument("--with-answer", action="store_true", help="also print the hidden answer and reference")
    p = _common(sub.add_parser("score", help="the reward of an answer to a task, as training computes it",
                               description="Exits 0 when every answer was scored, whatever its reward; 1 when "
                               "a verifier failed or (--answers) a line could not be scored."), _score)
    p.add_argument("domain", nargs="?", help="the task's domain (not with --answers)")
    p.add_argument("--seed", type=int, help="the task's seed (not with --answers)")
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--answer-file", metavar="FILE", help="the final answer's text, whatever it holds")
    given.add_argument("--turns-file", metavar="FILE", help='an episode: JSON {"turns": [...]}, one string per '
                       "assistant turn (tool calls in the compact format run for real)")
    given.add_argument("--answers", metavar="FILE.jsonl", help='many answers, one JSON object a line: {"domain": '
                       '..., "seed": N, "answer": "..."} (or "turns": [...]); one JSON result a line, in order, '
                       'each with its "line" (and "error" for a line that could not be scored)')
    p.add_argument("--json", action="store_true", help="print the result as JSON (--answers always does)")
    p = _common(sub.add_parser("check", help="oracles score 1, no-op and junk answers 0"), _check)
    p.add_argument("names", nargs="*", metavar="DOMAIN|FAMILY", help="default: every domain")
    p.add_argument("--per-domain", type=int, default=2, help="tasks checked per domain")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    add_harbor(sub)


def _common(p: argparse.ArgumentParser, handler: Handler | None) -> argparse.ArgumentParser:
    """--config and --plugin, on `tasks` (handler None) and on each action. An action's copies set
    nothing unless given: what `tempering tasks --config FILE ACTION` gave stays."""
    top = handler is None
    p.add_argument("--config", default=None if top else argparse.SUPPRESS,
                   help="a TOML config: its tasks.plugins are loaded, its [sandbox] (and for score its [reward]) apply")
    p.add_argument("--plugin", action="append", default=[] if top else argparse.SUPPRESS, metavar="MODULE",
                   help="import MODULE for its domains, as tasks.plugins does (repeatable)")
    if handler is not None:
        p.set_defaults(handler=_domains(handler))
    return p


def _domains(handler: Handler) -> Callable[[argparse.Namespace, list[str]], int]:
    """`handler` with the config loaded and every domain it names registered."""
    def run(args: argparse.Namespace, _rest: list[str]) -> int:
        cfg = load_config(args.config)
        load_plugins((*cfg.tasks.plugins, *args.plugin))
        return handler(args, cfg)
    return run


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


def _visible(task: Task) -> dict:
    env = task.environment
    return {"domain": task.domain, "id": task.id, "prompt": task.prompt,
            "messages": [dataclasses.asdict(m) for m in task.messages], "tools": list(task.tools),
            "workspace": None if env is None else {"workdir": env.workdir, "files": [n for n, _ in env.files],
                                                   "folder": env.folder or None},
            "budget": dataclasses.asdict(task.budget)}


def _hidden(task: Task) -> dict:
    return {"answer": task.answer, "ref": task.ref, "reference": task.reference}


@dataclass
class Answer:
    """An answer to score: its task (domain, seed) and assistant turns, and the line of the
    --answers file it came from; `error` says why that line cannot be scored."""

    line: int
    domain: str = ""
    seed: int = 0
    turns: list[str] = field(default_factory=list)
    error: str | None = None


def read_answers(path: str) -> list[Answer]:
    """The --answers file's lines (blank ones skipped), each an answer or the error that names it."""
    out = []
    for n, raw in enumerate(_read(path, "--answers").splitlines(), 1):
        if raw.strip():
            try:
                out.append(_answer(n, json.loads(raw)))
            except json.JSONDecodeError as e:
                out.append(Answer(n, error=f"line {n}: not JSON ({e})"))
    if not out:
        raise UserError(f"--answers {path}: no answers in it")
    return out


def _answer(n: int, row: object) -> Answer:
    """Line `n` read: an answer, or the error that says what the line lacks."""
    if not isinstance(row, dict):
        return Answer(n, error=f"line {n}: not a JSON object with domain, seed and answer")
    unknown = sorted(set(row) - {"domain", "seed", "answer", "turns"})
    if unknown:
        return Answer(n, error=f"line {n}: unknown key {unknown[0]!r} (domain, seed, answer or turns)")
    if not isinstance(row.get("domain"), str) or type(row.get("seed")) is not int:
        return Answer(n, error=f'line {n}: needs "domain" (a string) and "seed" (an integer)')
    turns = [row["answer"]] if "answer" in row else row.get("turns")
    if ("answer" in row) == ("turns" in row) or not isinstance(turns, list) or \
            not all(isinstance(t, str) for t in turns):
        return Answer(n, error=f'line {n}: needs "answer" (a string) or "turns" (a list of strings), not both')
    return Answer(n, row["domain"], row["seed"], turns)


def read_turns_file(path: str) -> list[str]:
    """An episode's assistant turns from JSON {"turns": [...]}."""
    try:
        turns = json.loads(_read(path, "--turns-file"))["turns"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise UserError(f'--turns-file {path}: not JSON {{"turns": [...]}} ({type(e).__name__}: {e})') from None
    if not isinstance(turns, list) or not all(isinstance(t, str) for t in turns):
        raise UserError(f'--turns-file {path}: "turns" must be a list of strings')
    return turns


def _read(path: str, flag: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{flag} {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{flag} {path}: cannot read it ({e})") from None


def _score(args: argparse.Namespace, cfg: Config) -> int:
    if args.answers is not None:
        if args.domain is not None or args.seed is not None:
            raise UserError("tasks score --answers: each line names its domain and seed (no DOMAIN or --seed)")
        return _score_all(read_answers(args.answers), cfg, batch=True)
    if args.domain is None or args.seed is None:
        raise UserError("tasks score: which task? DOMAIN and --seed N (or --answers FILE.jsonl)")
    # the answer file is the final answer's text, whatever it holds (JSON included): a transcript is --turns-file
    turns = [_read(args.answer_file, "--answer-file")] if args.answer_file else read_turns_file(args.turns_file)
    return _score_all([Answer(0, args.domain, args.seed, turns)], cfg, batch=False, as_json=args.json)


def _score_all(answers: list[Answer], cfg: Config, batch: bool, as_json: bool = True) -> int:
    """Score each answer in order and print its result (a batch's with its line): tasks drawn
    once per domain and seed, one scorer for them all. In a batch, a line that names no known
    domain is that line's error."""
    tasks: dict[tuple[str, int], Task] = {}
    for a in answers:
        try:
            if a.error is None and (a.domain, a.seed) not in tasks:
                (tasks[a.domain, a.seed],) = draw(get_domain(a.domain), 1, a.seed)
        except UserError as e:  # an unknown domain: that line's error, not the batch's
            if not batch:
                raise
            a.error = f"line {a.line}: {e}"
    bad = 0
    texts = [t for a in answers for t in a.turns]
    with Scorer(list(tasks.values()), texts, cfg.sandbox, cfg.reward, workers=min(2, len(tasks)) or 1) as scorer:
        for a in answers:
            if a.error is not None:
                bad += 1
                print(json.dumps({"line": a.line, "error": a.error}), flush=True)
                continue
            task = tasks[a.domain, a.seed]
            r, trajectory = scorer.score(task, a.turns)
            bad += r.failed
            out = {"domain": task.domain, "task": task.id, "total": r.total, "components": dict(r.components),
                   "weights": dict(r.weights), "reason": r.reason, "failed": r.failed,
                   "finish_reason": trajectory.finish_reason}
            if as_json:
                print(json.dumps({"line": a.line} | out if batch else out), flush=True)
            else:
                print(f"{task.id}: total {r.total:.3f} {dict(r.components)} ({r.reason})")
    return 1 if bad else 0


def _check(args: argparse.Namespace, cfg: Config) -> int:
    known = domains()
    names = sorted({n for key in args.names or [d.family for d in known.values()] for n in _select(key, known)})
    tasks = {n: draw(known[n], args.per_domain, args.seed) for n in names}
    bad = 0
    with Scorer([t for ts in tasks.values() for t in ts], sandbox=cfg.sandbox) as scorer:
        for name in names:
            for task in tasks[name]:
                row = scorer.check(known[name], task, args.seed)
                bad += not row.ok
                if args.json:
                    print(json.dumps(dataclasses.asdict(row) | {"ok": row.ok}), flush=True)
                else:
                    print(f"{'ok  ' if row.ok else 'FAIL'}  {task.id}  oracle {row.oracle}"
                          f"{'' if row.ok else '  ' + '; '.join(row.failures)}", flush=True)
    total = sum(len(ts) for ts in tasks.values())
    print(f"{total - bad} of {total} tasks of {len(names)} domains: oracle 1, no-op and junk 0", file=sys.stderr)
    return 1 if bad else 0


def _select(key: str, known: dict[str, Domain]) -> list[str]:
    if key in known:
        return [key]
    family = [n for n, d in known.items() if d.family == key]
    if not family:
        raise UserError(f"tasks check: {key!r} is neither a domain nor a family (`tempering tasks list`)")
    return family
