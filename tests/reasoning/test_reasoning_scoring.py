"""The scorer wrapper: replies that would make a scorer run code, loop or crash are contained;
fixed scorers no longer pay junk; math-verify takes numbers in another notation, and only numbers."""

from __future__ import annotations


import pytest

from tempering.records import Task
from tempering.verdict import InfrastructureError
from tempering.tasks.reasoning import entries, grade, scoring
from tempering.tasks.reasoning.domain import answer_block, extract


def task(dataset: str, seed: int = 0) -> Task:
    built = entries.build(dataset, seed)
    return Task(id=f"{dataset}-{seed}", domain=f"reasoning/{dataset}", prompt=built.entry["question"],
                answer=built.oracle, ref=entries.ref_text(dataset, seed))


def outcome(dataset: str, reply: str, seed: int = 0) -> tuple[float, str]:
    v = grade(task(dataset, seed), answer_block(reply))
    return v.components["outcome"], v.reason


def test_the_answer_is_the_last_complete_block():
    assert extract("think <answer>1</answer> no, <answer> 2 </answer> done") == " 2 "
    assert extract("<answer>1</answer> then <answer>2") == "1"
    assert extract("the answer is 2") is None and extract("<answer></answer>") == ""
    t = task("gcd")
    none, empty = grade(t, f"it is {t.answer}"), grade(t, "<answer>  </answer>")
    assert none.components == {"outcome": 0.0, "format": 0.0} and "no <answer>" in none.reason
    assert empty.components == {"outcome": 0.0, "format": 1.0} and empty.reason == "empty answer"
    right = grade(t, f"Reasoning...\n<answer>{t.answer}</answer>")
    assert right.components == {"outcome": 1.0, "format": 1.0}


@pytest.mark.parametrize("dataset", ["string_insertion", "spiral_matrix", "binary_matrix", "n_queens"])
def test_a_reply_is_never_evaluated_as_python(dataset, tmp_path):
    """These scorers eval() the reply to read a Python list; ours only reads literals."""
    marker = tmp_path / "ran"
    got, _ = outcome(dataset, f"open({str(marker)!r}, 'w').write('x') or [1]")
    assert got == 0.0 and not marker.exists()
    assert outcome(dataset, f"__import__('pathlib').Path({str(marker)!r}).touch()")[0] == 0.0 and not marker.exists()


def test_the_list_form_still_earns_the_libraries_credit_through_literal_eval():
    built = entries.build("spiral_matrix", 0)
    as_list = str([int(x) for x in built.oracle.split()])
    assert outcome("spiral_matrix", as_list) == (0.1, "partial credit")


@pytest.mark.parametrize("dataset,reply", [
    ("countdown", "__import__('os').system('touch /tmp/tempering-pwned')"),
    ("puzzle24", "eval(chr(49))"),
    ("polynomial_multiplication", "exec(x)"),
    ("intermediate_integration", "Integral(x, x)"),
    ("simple_integration", "x.func"),
    ("countdown", "9**9**9**9"),
    ("simple_integration", "(x+1)**1000000"),
])
def test_sympy_scorers_see_only_expressions(dataset, reply):
    """parse_expr evaluates Python: only digits, operators, the variable and elementary
    functions reach it, with small exponents."""
    got, reason = outcome(dataset, reply)
    assert got == 0.0 and reason.startswith("refused before scoring"), reason


@pytest.mark.parametrize("dataset,reply", [
    ("rush_hour", "A+999999999"), ("rubiks_cube", "U999999999"), ("coin_flip", "1e999999999"),
    ("coin_flip", "1/1e-99999999"),
])
def test_replies_that_would_make_a_scorer_loop_are_refused_at_once(dataset, reply):
    got, reason = outcome(dataset, reply)  # the scorer never ran: it would not return (bench: timings)
    assert got == 0.0 and reason.startswith("refused before scoring")


def test_a_scorer_that_raises_on_a_reply_gives_it_zero():
    assert outcome("prime_factorization", "two times three") == (0.0, "the scorer raised ValueError on the answer")
    assert outcome("boxnet", "0") == (0.0, "the scorer raised TypeError on the answer")


def test_a_scorer_that_raises_on_its_own_answer_is_a_failure(monkeypatch):
    built = entries.build("gcd", 3)

    def broken(answer, entry):
        raise KeyError("metadata")

    monkeypatch.setattr(built.dataset, "score_answer", broken)
    scoring._oracle_failure.cache_clear()
    with pytest.raises(InfrastructureError, match="raises on its own oracle answer"):
        grade(task("gcd", 3), answer_block("17"))
    scoring._oracle_failure.cache_clear()


def test_fixed_scorers_stop_paying_junk():
    assert outcome("game_of_life_halting", "banana") == (0.0, "wrong answer")  # bool('banana') == bool('False')
    oracle = entries.build("game_of_life_halting", 0).oracle
    assert outcome("game_of_life_halting", oracle.lower() + ".")[0] == 1.0
    assert entries.build("coin_flip", 1).oracle == "0.3125"
    assert outcome("coin_flip", "0", seed=1)[0] == 0.0  # the library's prefix credit: 1.0
    assert outcome("sudoku", entries.build("sudoku", 0).entry["question"].split("\n", 1)[1].replace("_", "1"))[0] == 0.0
    assert outcome("knights_knaves", "everyone is a knight")[0] == 0.0


def test_math_verify_takes_a_number_in_another_notation():
    for reply in ("0.5", "1/2", "\\frac{1}{2}", "\\dfrac{1}{2}", "$\\frac{1}{2}$", "\\boxed{\\frac{1}{2}}", "p = 0.50",
                  "2/4"):
        assert scoring.math_equal(reply, "0.5"), reply
    for reply in ("0.4", "1/3", "x", "0.5, 0.6", "[0.5]", "1 - 1/2", "\\frac{1}{2} + 0"):
        assert not scoring.math_equal(reply, "0.5"), reply
    for reply in ("62", "62.0", "x = 62", "\\boxed{62}", "$62$", "+62"):
        assert scoring.math_equal(reply, "62"), reply
    # an integer answer takes no fraction: an arithmetic question's own expression equals its answer
    for reply in ("124/2", "\\frac{124}{2}", "60 + 2", "62 apples", "6.2e1"):
        assert not scoring.math_equal(reply, "62"), reply


def test_math_verify_through_the_domains():
    assert outcome("coin_flip", "\\frac{5}{16}", seed=1) == (1.0, "equal to the answer (math-verify)")
    assert outcome("coin_flip", "5/16", seed=1)[0] == outcome("coin_flip", "0.3125", seed=1)[0] == 1.0
    built = entries.build("basic_arithmetic", 1)
    assert built.oracle == "-4" and built.entry["question"] == "Calculate 5 - 3 - 6."
    assert outcome("basic_arithmetic", "\\boxed{-4}", seed=1) == (1.0, "equal to the answer (math-verify)")
    assert outcome("basic_arithmetic", "x = -4.0", seed=1)[0] == 1.0
    assert outcome("basic_arithmetic", "5 - 3 - 6", seed=1)[0] == 0.0  # the question's expression
    assert outcome("fraction_simplification", "13524/57134", seed=1)[0] == 0.0  # not math-verified: unsimplified
