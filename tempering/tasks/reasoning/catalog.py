"""Which reasoning-gym datasets are domains, and how our wrapper scores each one differently from
the library's own scorer, with the reason (found by the junk audit, `audit.py`, or by reading the
scorer).

The names are listed here rather than read from the library's registry, so that registering the
family does not import reasoning-gym (about a second, sympy included) in every process that loads
the registry; `tests/reasoning` checks the list against the installed library. Nothing here
imports reasoning-gym: `scoring.py` turns these entries into behaviour.

A dataset is either excluded (`EXCLUDED`: name -> why it cannot be a domain) or a domain. A
domain's scorer is the library's, unless `FIXED` names it: then the `Fix` says what is wrong with
the library's scorer (`why`) and what the wrapper does instead (`does`); its fields drive
`scoring.py`. Orthogonal to fixes: `ORACLES` (entries without an answer, whose oracle we build),
`MATH_VERIFY` (numeric answers that math-verify may find equal in another notation), `CARRIED`
(entries that another process cannot rebuild: verified against the task's answer) and `HEAVY`
(verifiers that run in a process a deadline can kill).
"""

from __future__ import annotations

from dataclasses import dataclass

# reasoning-gym 0.1.25's registry, less `composite` (EXCLUDED): 105 generators with scorers.
DATASETS = (
    "ab", "acre", "advanced_geometry", "aiw", "arc_1d", "arc_agi", "base_conversion", "basic_arithmetic", "bf",
    "binary_alternation", "binary_matrix", "bitwise_arithmetic", "boxnet", "caesar_cipher", "calendar_arithmetic",
    "chain_sum", "circuit_logic", "codeio", "coin_flip", "color_cube_rotation", "complex_arithmetic", "count_bits",
    "count_primes", "countdown", "course_schedule", "cryptarithm", "decimal_arithmetic", "decimal_chain_sum", "dice",
    "emoji_mystery", "family_relationships", "figlet_font", "fraction_simplification", "futoshiki", "game_of_life",
    "game_of_life_halting", "gcd", "graph_color", "group_anagrams", "gsm_symbolic", "intermediate_integration",
    "isomorphic_strings", "jugs", "kakurasu", "knight_swap", "knights_knaves", "largest_island", "lcm",
    "leg_counting", "letter_counting", "letter_jumble", "list_functions", "mahjong_puzzle", "manipulate_matrix",
    "maze", "mini_sudoku", "modulo_grid", "n_queens", "needle_haystack", "number_filtering", "number_format",
    "number_sequence", "number_sorting", "palindrome_generation", "palindrome_partitioning", "path_star",
    "polynomial_equations", "polynomial_multiplication", "pool_matrix", "power_function", "prime_factorization",
    "products", "propositional_logic", "puzzle24", "quantum_lock", "ransom_note", "rearc", "rectangle_count",
    "rotate_matrix", "rotten_oranges", "rubiks_cube", "rush_hour", "self_reference", "sentence_reordering",
    "shortest_path", "simple_equations", "simple_geometry", "simple_integration", "sokoban", "spell_backward",
    "spiral_matrix", "string_insertion", "string_manipulation", "string_splitting", "string_synthesis", "sudoku",
    "survo", "syllogism", "time_intervals", "tower_of_hanoi", "tsumego", "word_ladder", "word_sequence_reversal",
    "word_sorting", "zebra_puzzles",
)

EXCLUDED: dict[str, str] = {
    "composite": "not a generator: a weighted mix of the other datasets, which the task mix's weights "
                 "(`tasks.weights`, e.g. `reasoning/*`) already do",
    "propositional_logic": "gameable beyond repair: any conclusion the premises entail scores 1.0, so restating a "
                           "premise (`(Q → P)` given as premise 3) is full credit, and any tautology or even '0' or "
                           "random lowercase text scores 0.25; the entries' own example answers are often a premise "
                           "restated (`(Q ∧ Q)` from premise `Q`), so no stricter check keeps the oracle at 1.0",
}


@dataclass(frozen=True)
class Fix:
    """How the wrapper departs from a library scorer. `full_at`: scores >= it count as 1.0 and
    all others as 0 (the library's partial credit is dropped); `above`: scores <= it become 0
    (a consolation floor), higher partial credit is kept; `guard`: the name of a check in
    `scoring.GUARDS` that refuses an answer (score 0) before the scorer sees it; `scorer`: the
    name of a replacement in `scoring.SCORERS`; `safe_eval`: the library's scorer `eval`s the
    answer, and its module's `eval` is replaced by `ast.literal_eval` (see `entries.library`)."""

    why: str
    does: str
    full_at: float | None = None
    above: float | None = None
    guard: str = ""
    scorer: str = ""
    safe_eval: bool = False


_SUBSTRING = Fix(
    why="the library's default scorer (or `compute_decimal_reward`) gives len(answer)/len(reply) to any reply that "
        "contains the answer, so a long list of numbers or the question copied back earns credit",
    does="only the library's full score counts (1.0); the substring credit is dropped",
    full_at=1.0)


def _binary(why: str, **kw) -> Fix:
    return Fix(why=why, does="only the library's full score counts (1.0); its partial credit is dropped",
               full_at=1.0, **kw)


def _floor(above: float, why: str, **kw) -> Fix:
    return Fix(why=why, does=f"scores of {above:g} or less count as 0; higher partial credit is kept", above=above,
               **kw)


def _eval(credit: str) -> Fix:
    return Fix(why="the library's scorer calls eval() on the reply (to read a Python list): a reply can run any "
                   "code in the verifier's process", safe_eval=True,
               does=f"its module's eval is ast.literal_eval, so only literal lists are read (and earn the library's "
                    f"{credit} for the list form); nothing is executed")


_SYMPY = ("the library parses the reply with sympy's parse_expr, which evaluates Python: a reply like "
          "`__import__('os').system(...)` would run in the verifier's process")

FIXED: dict[str, Fix] = {
    **{name: _SUBSTRING for name in (
        "acre", "aiw", "arc_1d", "base_conversion", "basic_arithmetic", "bf", "binary_alternation", "caesar_cipher",
        "chain_sum", "count_bits", "count_primes", "course_schedule", "gcd", "isomorphic_strings", "largest_island",
        "lcm", "leg_counting", "letter_counting", "list_functions", "mahjong_puzzle", "maze", "modulo_grid",
        "number_filtering", "number_sequence", "products", "ransom_note", "rotate_matrix", "rotten_oranges",
        "simple_equations", "simple_geometry", "string_manipulation", "string_splitting", "string_synthesis",
        "syllogism", "word_sequence_reversal")},
    "manipulate_matrix": _binary("after its own checks it falls back to substring credit (len(answer)/len(reply)): "
                                 "the question copied back earns credit"),
    "tsumego": _binary("substring credit, 0.05 for any coordinate and 0.01 for any other reply"),
    "advanced_geometry": _floor(0.05, "0.01 or 0.05 for any reply, even an empty one (its 0.5 for an incircle "
                                      "radius right to 2 decimals is kept)"),
    "arc_agi": _floor(0.05, "0.05 for any reply that parses as a board, '0' included"),
    "rearc": _floor(0.05, "0.05 for any reply that parses as a board, '0' included"),
    "color_cube_rotation": _binary("0.01 for any reply, even an empty one"),
    "cryptarithm": _floor(0.01, "0.01 for any reply that parses as a letter=digit mapping"),
    "graph_color": _floor(0.01, "0.01 for any reply that parses as JSON"),
    "group_anagrams": _floor(0.01, "0.01 for any reply that parses as JSON"),
    "jugs": _floor(0.01, "0.01 for any reply that parses as JSON"),
    "gsm_symbolic": Fix(why="it takes the first number anywhere in the reply (a regex search): the question copied "
                            "back scores 1.0 when its first number is the answer (seed 30 of 40), and any reply with "
                            "a number gets 0.01",
                        does="the reply must be a single number equal to the answer (thousands separators allowed; "
                             "math-verify also takes it in LaTeX or as 'x = ...')", scorer="single_number"),
    "power_function": _binary("0.01 for any reply, even an empty one"),
    "knight_swap": _floor(0.05, "0.05 for legal moves that do not solve the puzzle (its credit for longer "
                                "solutions is kept)"),
    "tower_of_hanoi": _floor(0.05, "0.05 for legal moves that do not solve the puzzle (its credit for longer "
                                   "solutions is kept)"),
    "palindrome_generation": _floor(0.05, "0.02 for any string, 0.05 for any palindrome"),
    "rush_hour": _floor(0.01, "0.01 for legal moves that leave the puzzle unsolved; a move 'A+999999999' loops a "
                              "billion times in the scorer (a hang)", guard="rush_hour"),
    "boxnet": _floor(0.05, "at least 0.05 for any reply that parses as JSON; it raises on JSON that is not a list "
                           "of objects ('0': TypeError)"),
    "codeio": _binary("0.01 for any JSON object and similarity credit for one with the expected keys and wrong "
                      "values (the keys are in the question)"),
    "rubiks_cube": _binary("0.01 for any reply that does not solve the cube (its credit for stickers in place "
                           "raises AttributeError with the installed magiccube, and a bare except turns that into "
                           "0.01); a move like 'U999999999' expands to a billion moves (a hang)",
                           guard="rubiks_cube"),
    "fraction_simplification": _binary("0.1 when the numerator or denominator equals the unsimplified one (the "
                                       "question's fraction copied back), 0.05 for any reply, 0.01 for an empty "
                                       "one"),
    "prime_factorization": _binary("0.5 when the factors multiply to the number (the number itself copied back), "
                                   "0.01 for any reply; raises ValueError on a reply with a non-integer factor"),
    "sentence_reordering": _binary("credit per word in place and 0.05 for any reply of another length: the "
                                   "scrambled sentence copied back earns the words already in place"),
    "emoji_mystery": _binary("0.01 for any reply and credit per character for a reply of the right length"),
    "spell_backward": _binary("credit per leading character in place: random text earned 0.11"),
    "figlet_font": _binary("0.1 per character in place: random text earned 0.1"),
    "letter_jumble": _binary("credit per word in place: the scrambled words copied back earn every word whose "
                             "letters the scramble left in order (up to 0.29 on 5 seeds)"),
    "word_sorting": _binary("at least 0.2 for any permutation of the words: the question's word list copied back "
                            "earns it"),
    "word_ladder": _binary("0.5 per word not in its dictionary, so a ladder of made-up words, changed one letter "
                           "at a time (no search needed), earns 0.5**k"),
    "knights_knaves": _binary("0.3 + 0.7 x (right roles) for any assignment of the right size: calling everyone a "
                              "knight earns about 0.65 on average, and the question copied back earned 0.65"),
    "sudoku": _binary("credit per cell: the puzzle's givens copied back, blanks filled with any digit, earn "
                      "credit for every given (0.58 on seed 0)"),
    "mini_sudoku": _binary("credit per cell: the puzzle's givens copied back, blanks filled with any digit, earn "
                           "credit for every given"),
    "futoshiki": _binary("credit per cell: the puzzle's givens copied back, blanks filled with any digit, earn "
                         "credit for every given"),
    "game_of_life": _binary("credit per cell: an all-dead grid earns the cells that are dead after the step "
                            "(0.96 on seed 0)"),
    "pool_matrix": _floor(0.1, "0.1 for any matrix of the right shape (all zeros)"),
    "calendar_arithmetic": _binary("0.1 (0.05) for any weekday name and relative-error credit for any count, so "
                                   "a constant guess earns credit ('Monday' 0.1, '10' 0.24)"),
    "time_intervals": _binary("closeness credit for any duration: '0' earned 0.95 on day counts"),
    "rectangle_count": _binary("closeness credit for any count: '0' earned up to 0.64"),
    "complex_arithmetic": Fix(why="credit exp(-distance) for any number: '0' earns exp(-|z|), up to 0.01 on the "
                                  "audit's seeds and more for small results",
                              does="scores of 0.99 or more (within 0.01 of the result) count as 1.0, others as 0",
                              full_at=0.99),
    "polynomial_equations": Fix(why="credit exp(-10 x distance) per root less penalties, so '0' earns 0.5 where 0 "
                                    "is one of two roots; an entry without real roots would score every reply "
                                    "without numbers 1.0 (make() redraws entries whose answer is empty)",
                                does="scores of 0.99 or more (every root within about 0.001) count as 1.0, others "
                                     "as 0", full_at=0.99),
    "coin_flip": Fix(why="credit for a matching prefix of the digits divided by the shorter length, so '0' scores "
                         "1.0 on every probability below 1; its absolute tolerance (1e-4) also takes '0' for the "
                         "probabilities under 1e-4 (33 in 2,000 entries); it reads the reply with Fraction(), for "
                         "which '1e999999999' is a hang and a memory bomb",
                     does="the reply must be a number or fraction within 0.1% of the probability (relative); replies "
                          "with an exponent of 100 or more, or over 64 characters, are refused",
                     guard="plain_number", scorer="probability"),
    "game_of_life_halting": Fix(why="it compares bool(reply) == bool(answer): both answers are the non-empty "
                                     "strings 'True' and 'False', so any non-empty reply scores 1.0",
                                does="the reply must be the answer, 'True' or 'False' (case and a final period "
                                     "ignored)", scorer="true_false"),
    "binary_matrix": _eval("0.1"),
    "spiral_matrix": _eval("0.1"),
    "string_insertion": _eval("0.1"),
    "n_queens": _eval("0.5"),
    "countdown": _floor(0.05, f"{_SYMPY}; 0.01 for any reply and 0.05 for any expression", guard="arithmetic"),
    "puzzle24": _floor(0.01, f"{_SYMPY}; 0.01 for any reply", guard="arithmetic"),
    "polynomial_multiplication": Fix(why=_SYMPY, does="the reply must be a polynomial in the question's variable "
                                     "(digits, + - * / ** ( ) and that variable) before the scorer sees it",
                                     guard="polynomial"),
    "simple_integration": Fix(why=_SYMPY, does="the reply must be an expression in the integration variable, C "
                              "and elementary functions (a fixed list of names) before the scorer sees it",
                              guard="antiderivative"),
    "intermediate_integration": Fix(why=_SYMPY, does="the reply must be an expression in the integration "
                                    "variable, C and elementary functions (a fixed list of names) before the "
                                    "scorer sees it", guard="antiderivative"),
}

# Entries whose answer is None (the scorer checks validity): the oracle we build for the audit,
# `Task.answer` and the SFT reference.
ORACLES: dict[str, str] = {
    "graph_color": "the entry's `possible_answer` coloring, as the JSON object the question asks for",
    "rubiks_cube": "the entry's `example_correct_answer` move sequence",
    "rush_hour": "a breadth-first search over the board (one-step moves, shortest solution)",
    "boxnet": "a plan that walks each box along a shortest path of squares to its target, one move per step",
}

# Single numbers, possibly given in another notation (\frac{1}{2}, \boxed{62}, x = 62, 62.0):
# math-verify decides equality when the library's scorer does not give full credit. Only literal
# numbers reach it (`scoring.math_equal`): an arithmetic question copied back is an expression
# equal to its answer, and math-verify would say so.
MATH_VERIFY = frozenset({
    "basic_arithmetic", "chain_sum", "products", "gcd", "lcm", "count_primes", "count_bits", "leg_counting",
    "simple_equations", "simple_geometry", "number_sequence", "gsm_symbolic", "coin_flip",
})

# Generators that iterate over sets of strings, so that the same seed gives another entry in
# another process (Python randomizes str hashes per process: found by building every dataset
# under two PYTHONHASHSEEDs). Their scorers read only the entry's answer, so their verifiers
# score against the answer the task carries instead of rebuilding the entry. (knight_swap and
# word_ladder also differ across processes, in their example solution only: their scorers check
# a reply's validity against the question, which is the same.)
CARRIED: dict[str, str] = {
    "isomorphic_strings": "the strings are drawn from a set of letters",
    "ransom_note": "the letters are drawn from a set",
    "list_functions": "some rules draw from a set of the input's elements",
    "polynomial_multiplication": "the terms come from sympy's set of monomials (and the question differs too)",
}

# Datasets whose constructor draws from the seed (the others only load files, and an entry is
# built from one object per process with its seed set: `entries.build`; a test checks both ways
# agree).
SEEDED_INIT = frozenset({"acre", "gsm_symbolic", "list_functions", "survo"})

# Verifiers that run in a process the reward service kills at its deadline (a thread cannot be
# stopped). The guards above keep code out of sympy and bound the literals, but simplifying a
# valid expression can still take minutes. Every other scorer is plain string, JSON or number
# handling bounded by the reply's length (the guards cut the two loops a reply could make long).
HEAVY: dict[str, str] = {
    name: "its scorer runs sympy (parse_expr, diff, simplify) on the reply, which can run for minutes"
    for name in ("countdown", "puzzle24", "polynomial_multiplication", "simple_integration",
                 "intermediate_integration")
}


def domain_datasets() -> tuple[str, ...]:
    """The datasets registered as domains `reasoning/<dataset>`."""
    return tuple(d for d in DATASETS if d not in EXCLUDED)
