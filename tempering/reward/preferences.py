"""Reward-model training data: JSONL files of preference pairs or of scored completions, the
demo's procedural preference pairs, and the held-out split by prompt.

A file holds one kind of record, told by its keys (no flag needed):

- pairs: `{"prompt": str, "chosen": str, "rejected": str}`, `chosen` the better completion;
- scores: `{"prompt": str, "completion": str, "score": number}`.

Other keys are ignored (metadata a user keeps with the data). A bad line (not JSON, a missing or
mistyped key, the other kind of record than the file's first) is a `UserError` naming the file,
the line number and the key. Blank lines are skipped.

`demo_pairs` makes pairs from the demo's task domains: `chosen` the task's correct answer,
`rejected` a plausible wrong one (two neighbouring characters swapped, one dropped, one replaced,
or the prompt's input echoed unchanged: unsorted, unreversed). It does not train or tokenize.
"""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from tempering.errors import UserError

DEMO_DOMAINS = ("sorting", "strings")
MISTAKES = ("swap", "drop", "replace", "echo")
FIELDS = {"pairs": ("prompt", "chosen", "rejected"), "scores": ("prompt", "completion", "score")}


@dataclass(frozen=True)
class Pair:
    prompt: str
    chosen: str
    rejected: str
    where: str = ""  # "file:line" (or "demo pair n"), for errors about this record


@dataclass(frozen=True)
class Scored:
    prompt: str
    completion: str
    score: float
    where: str = ""


Record = Pair | Scored


def kind_of(records: Sequence[Record]) -> str:
    return "pairs" if isinstance(records[0], Pair) else "scores"


def read_records(path: str | Path) -> list[Record]:
    """Every record of a JSONL file, all of one kind (the first record's)."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read reward-model data ({e})") from None
    records: list[Record] = []
    kind, first = "", 0
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        row = _parse(line, where)
        this = _kind(row, where)
        if not kind:
            kind, first = this, n
        elif this != kind:
            raise UserError(f"{where}: a record of {this} (keys {', '.join(FIELDS[this])}) in a file of {kind} "
                            f"(line {first} is one); a file holds one kind")
        records.append(_record(row, kind, where))
    if not records:
        raise UserError(f"{path}: no records (expected JSONL lines of {FIELDS['pairs']} or {FIELDS['scores']})")
    return records


def read_files(paths: Sequence[str | Path]) -> list[Record]:
    """The records of several files, which must all be of one kind."""
    per_file = {str(path): read_records(path) for path in paths}
    kinds = {path: kind_of(records) for path, records in per_file.items()}
    if len(set(kinds.values())) > 1:
        raise UserError(f"--data: the files mix preference pairs and scored completions ({kinds}); "
                        "train on one kind at a time")
    return [r for records in per_file.values() for r in records]


def split_by_prompt(records: Sequence[Record], fraction: float, seed: int) -> tuple[list[Record], list[Record]]:
    """(train, held-out): `fraction` of the distinct prompts, drawn by `seed`, with all their
    records held out, so no held-out prompt is ever trained on."""
    prompts = sorted({r.prompt for r in records})
    random.Random(seed).shuffle(prompts)
    held = set(prompts[: round(fraction * len(prompts))])
    train = [r for r in records if r.prompt not in held]
    if not train:
        raise UserError(f"--held-out {fraction}: leaves no records to train on ({len(prompts)} distinct prompts)")
    return train, [r for r in records if r.prompt in held]


def _parse(line: str, where: str) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise UserError(f"{where}: not valid JSON ({e.msg})") from None
    if not isinstance(row, dict):
        raise UserError(f"{where}: expected a JSON object, got {type(row).__name__}")
    return row


def _kind(row: dict, where: str) -> str:
    kinds = [k for k, keys in FIELDS.items() if any(key in row for key in keys[1:])]
    if len(kinds) != 1:
        have = "both" if kinds else "neither"
        raise UserError(f"{where}: has {have} of 'chosen'/'rejected' (a pair) and 'completion'/'score' (a scored "
                        f"completion); keys: {sorted(row)}")
    return kinds[0]


def _record(row: dict, kind: str, where: str) -> Record:
    for key in FIELDS[kind]:
        if key not in row:
            raise UserError(f"{where}: missing key {key!r}")
        value = row[key]
        if key == "score":
            # bool is an int in Python, and a JSON true is not a score
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise UserError(f"{where}: key 'score' must be a finite number, got {value!r}")
        elif not isinstance(value, str):
            raise UserError(f"{where}: key {key!r} must be a string, got {value!r}")
    if kind == "pairs":
        return Pair(row["prompt"], row["chosen"], row["rejected"], where)
    return Scored(row["prompt"], row["completion"], float(row["score"]), where)


def write_records(records: Sequence[Record], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in records:
            keys = FIELDS["pairs" if isinstance(r, Pair) else "scores"]
            f.write(json.dumps({k: getattr(r, k) for k in keys}) + "\n")


def demo_pairs(n: int, seed: int = 0, domains: Sequence[str] = DEMO_DOMAINS) -> list[Pair]:
    """`n` pairs over `domains` in turn: the correct answer against a plausible wrong one."""
    from tempering.tasks.registry import get_domain  # loads every built-in domain: only when asked

    rng = random.Random(seed)
    made = [get_domain(d) for d in domains]
    tasks = [made[i % len(made)].generate(rng) for i in range(n)]
    # replacements come from what the domain's answers are made of (digits, letters a-h), so a
    # wrong answer never gives itself away by a character correct answers never have
    chars = {d: sorted({c for t in tasks if t.domain == d for c in t.answer}) for d in domains}
    for t in tasks:
        if not t.answer:
            raise UserError(f"domain {t.domain!r} has no short answers to make preference pairs of")
    return [Pair(t.prompt, t.answer, wrong_answer(t.prompt, t.answer, chars[t.domain], rng), f"demo pair {i + 1}")
            for i, t in enumerate(tasks)]


def wrong_answer(prompt: str, answer: str, chars: Sequence[str], rng: random.Random) -> str:
    """A wrong answer a weak policy could give: a random mistake of `MISTAKES`, the next that
    applies when it does not (a swap of "1111" is no mistake)."""
    order = list(MISTAKES)
    rng.shuffle(order)
    for mistake in order:
        wrong = _mistake(mistake, prompt, answer, chars, rng)
        if wrong and wrong != answer:
            return wrong
    return answer + (chars[0] if chars else "x")  # only for one-character answers over one character


def _mistake(mistake: str, prompt: str, answer: str, chars: Sequence[str], rng: random.Random) -> str | None:
    if mistake == "swap":
        spots = [i for i in range(len(answer) - 1) if answer[i] != answer[i + 1]]
        if not spots:
            return None
        i = rng.choice(spots)
        return answer[:i] + answer[i + 1] + answer[i] + answer[i + 2:]
    if mistake == "drop":
        if len(answer) < 2:
            return None
        i = rng.randrange(len(answer))
        return answer[:i] + answer[i + 1:]
    if mistake == "replace":
        i = rng.randrange(len(answer))
        others = [c for c in chars if c != answer[i]]
        return answer[:i] + rng.choice(others) + answer[i + 1:] if others else None
    # echo: the input of a "<verb> <input>=" prompt as it was given (the demo's sort and rev)
    m = re.fullmatch(r"\w+ (\S+)=", prompt)
    return m.group(1) if m else None
