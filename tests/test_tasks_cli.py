"""`tempering tasks`: list, sample, score and check, run as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).parent / "plugin_pkg")}  # a plugin with a broken domain


def tasks(*args):
    return subprocess.run([sys.executable, "-m", "tempering.cli", "tasks", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=ENV)


def test_list_names_every_domain_with_its_family():
    r = tasks("list")
    rows = [line.split() for line in r.stdout.splitlines()]
    assert r.returncode == 0 and ["sorting", "sorting"] == rows[[x[0] for x in rows].index("sorting")][:2]
    assert ["ext/echo", "ext"] == rows[[x[0] for x in rows].index("ext/echo")][:2]


def test_sample_hides_the_answer_unless_asked_and_score_rates_an_answer(tmp_path):
    seen = json.loads(tasks("sample", "sorting", "--seed", "5", "--json").stdout)
    assert "answer" not in seen and seen["prompt"].startswith("sort ")
    full = json.loads(tasks("sample", "sorting", "--seed", "5", "--json", "--with-answer").stdout)
    assert full["id"] == seen["id"] and full["answer"]
    answer = tmp_path / "a.txt"
    answer.write_text(full["answer"])
    r = tasks("score", "sorting", "--seed", "5", "--answer-file", str(answer), "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["task"] == seen["id"] and out["components"]["outcome"] == 1.0
    answer.write_text("nope")
    out = json.loads(tasks("score", "sorting", "--seed", "5", "--answer-file", str(answer), "--json").stdout)
    assert out["components"]["outcome"] == 0.0 and out["reason"] == "wrong answer"
    # a multi-turn answer, asked for with --turns-file, runs its tool calls
    files = json.loads(tasks("sample", "files", "--seed", "2", "--json", "--with-answer").stdout)
    answer.write_text(json.dumps({"turns": files["reference"]}))
    out = json.loads(tasks("score", "files", "--seed", "2", "--turns-file", str(answer), "--json").stdout)
    assert out["components"]["outcome"] == 1.0 and out["components"]["valid_calls"] == 1.0
    # the same file as --answer-file is a final answer like any other: JSON junk scores 0, no error
    r = tasks("score", "files", "--seed", "2", "--answer-file", str(answer), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["components"]["outcome"] == 0.0, r.stderr
    answer.write_text('{"turn": []}')
    r = tasks("score", "files", "--seed", "2", "--turns-file", str(answer))
    assert r.returncode == 2 and r.stderr.startswith(f"error: --turns-file {answer}: ") and "Traceback" not in r.stderr


def test_an_answer_that_is_a_json_object_is_the_answer_text(tmp_path):
    """reasoning/codeio's answers are JSON objects: its reference, read from a file, scores 1, and
    its bare answer (a JSON object without the <answer> tags the domain asks for) scores 0."""
    task = json.loads(tasks("sample", "reasoning/codeio", "--seed", "1", "--json", "--with-answer").stdout)
    assert task["answer"].startswith("{") and task["reference"] == f"<answer>{task['answer']}</answer>"
    answer = tmp_path / "a.txt"
    for text, outcome in ((task["reference"], 1.0), (task["answer"], 0.0)):
        answer.write_text(text)
        r = tasks("score", "reasoning/codeio", "--seed", "1", "--answer-file", str(answer), "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["components"]["outcome"] == outcome, r.stderr


def test_the_answers_batch_gives_what_single_calls_give_and_names_its_bad_lines(tmp_path):
    """One call scores many answers: each valid line's result is the single call's (the oracle),
    with its line; a line that cannot be scored is an error naming it, and the rest go on."""
    files = json.loads(tasks("sample", "files", "--seed", "2", "--json", "--with-answer").stdout)
    codeio = json.loads(tasks("sample", "reasoning/codeio", "--seed", "1", "--json", "--with-answer").stdout)
    good = [("sorting", 5, {"answer": "03578"}), ("sorting", 5, {"answer": "nope"}),
            ("files", 2, {"turns": files["reference"]}), ("reasoning/codeio", 1, {"answer": codeio["reference"]}),
            ("reasoning/codeio", 1, {"answer": codeio["answer"]}), ("sorting", 9, {"answer": '{"turns": ["1"]}'})]
    lines = [json.dumps({"domain": d, "seed": s, **a}) for d, s, a in good]
    lines[3:3] = ["", "not json", json.dumps({"domain": "chess", "seed": 1, "answer": "e4"}),
                  json.dumps({"domain": "sorting", "seed": 5}), json.dumps([1])]
    batch = tmp_path / "answers.jsonl"
    batch.write_text("\n".join(lines) + "\n")
    r = tasks("score", "--answers", str(batch))
    assert r.returncode == 1, r.stderr  # the bad lines
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["line"] for row in rows] == [1, 2, 3, 5, 6, 7, 8, 9, 10, 11]
    errors = {row["line"]: row["error"] for row in rows if "error" in row}
    assert sorted(errors) == [5, 6, 7, 8] and all(e.startswith(f"line {n}: ") for n, e in errors.items())
    assert "not JSON" in errors[5] and "unknown task domain 'chess'" in errors[6] and '"answer"' in errors[7]
    answer = tmp_path / "a.txt"
    scored = [row for row in rows if "error" not in row]
    for (domain, seed, given), row in zip(good, scored):
        if "turns" in given:
            answer.write_text(json.dumps({"turns": given["turns"]}))
            single = tasks("score", domain, "--seed", str(seed), "--turns-file", str(answer), "--json")
        else:
            answer.write_text(given["answer"])
            single = tasks("score", domain, "--seed", str(seed), "--answer-file", str(answer), "--json")
        assert {"line": row["line"]} | json.loads(single.stdout) == row
    assert [row["components"]["outcome"] for row in scored] == [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert tasks("score", "sorting", "--seed", "5", "--answers", str(batch)).returncode == 2
    assert tasks("score", "sorting", "--answer-file", str(answer)).returncode == 2  # no --seed


def test_check_passes_good_domains_and_names_a_broken_one():
    r = tasks("check", "sorting", "files", "--per-domain", "2", "--json")
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert r.returncode == 0 and len(rows) == 4 and all(row["ok"] and row["oracle"] == 1.0 for row in rows)
    assert all(set(row["answers"].values()) == {0.0} for row in rows)
    r = tasks("check", "ext")
    assert r.returncode == 1 and "FAIL  ext/broken-" in r.stdout and "oracle scored 0.0" in r.stdout
    assert tasks("check", "chess").returncode == 2


def test_every_shipped_family_passes_the_check():
    """One task of every domain (more than 120, every family): oracle 1, no-op and junk answers 0.
    bench/domain_check.py checks many tasks per domain."""
    r = subprocess.run([sys.executable, "-m", "tempering.cli", "tasks", "check", "--per-domain", "1", "--json",
                        "reasoning", "finance", "cad", "terminal", "sorting", "strings", "code", "files", "arithmetic"],
                       capture_output=True, text=True, timeout=900, cwd=ROOT)
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert r.returncode == 0, [row for row in rows if not row["ok"]] or r.stderr[-2000:]
    families = {row["domain"].split("/")[0] for row in rows}
    assert len(rows) > 120 and families == {"reasoning", "finance", "cad", "terminal", "sorting", "strings", "code",
                                            "files", "arithmetic"}
    assert all(row["oracle"] == 1.0 for row in rows)


PLUGIN = """
import random

from tempering.records import Budget, Task
from tempering.tasks import Domain
from tempering.tasks.answers import exact_answer


def _make(rng: random.Random) -> Task:
    a, b = rng.randrange(10), rng.randrange(10)
    return Task(id="", domain="my/add", prompt=f"{a}+{b}=", answer=str(a + b), reference=str(a + b),
                budget=Budget(max_tokens=4))


DOMAIN = Domain("my/add", "add two digits (a tasks.plugins module)", exact_answer, make=_make, alphabet="0123456789+=")
"""


def test_a_config_plugin_domain_is_seen_by_every_command(tmp_path):
    """A module named in `tasks.plugins` (not installed, no entry point) is a domain for list,
    sample, score and check with --config, and with --plugin alone."""
    (tmp_path / "myplug.py").write_text(PLUGIN)
    config = tmp_path / "run.toml"
    config.write_text('[tasks]\nplugins = ["myplug"]\nweights = { "my/add" = 1.0 }\n'
                      '[reward]\nweights = { outcome = 1.0 }\n')

    def run(*args):
        return subprocess.run([sys.executable, "-m", "tempering.cli", "tasks", *args], capture_output=True, text=True,
                              timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(tmp_path)})

    assert "my/add" not in run("list").stdout
    assert "unknown task domain 'my/add'" in run("sample", "my/add", "--seed", "3").stderr
    for how in (["--config", str(config)], ["--plugin", "myplug"]):
        assert "my/add" in run("list", *how).stdout, how
        assert "my/add" in run(*how).stdout, how  # a bare `tempering tasks` lists too
        task = json.loads(run("sample", "my/add", "--seed", "3", "--json", "--with-answer", *how).stdout)
        assert task["domain"] == "my/add" and task["prompt"].endswith("=")
    answer = tmp_path / "answer.txt"
    answer.write_text(task["answer"])
    r = run("score", "my/add", "--seed", "3", "--answer-file", str(answer), "--json", "--config", str(config))
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["components"]["outcome"] == 1.0, r
    assert out["weights"]["outcome"] == 1.0 and out["weights"].get("partial", 0.0) == 0.0, out  # the config's [reward]
    r = run("check", "my/add", "--config", str(config), "--json")
    assert r.returncode == 0 and all(json.loads(line)["ok"] for line in r.stdout.splitlines()), r
