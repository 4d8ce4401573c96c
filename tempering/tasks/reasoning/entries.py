"""Entries by reference: a task's `ref` names a dataset, a seed and a config, and any process
rebuilds the entry from it (cached: a group's samples are verified against one entry).

`ref_text(dataset, seed)` -> '{"config": {}, "dataset": "gcd", "seed": 123}'; `build(...)` ->
`Built(dataset, entry, oracle)`: the library's dataset object (its scorer is a method and reads
its config), the entry `{"question", "answer", "metadata"}` and the oracle answer as a string.
An entry's seed is the dataset's seed with one item (`create_dataset(name, seed=s, size=1)[0]`),
so the same (name, seed, config) gives the same entry every time, in every process (with the
pinned release of the library). It is built from one dataset object per process with its seed
set, which gives that same entry without reloading the dataset's files, except for the datasets
whose constructor draws from the seed (`catalog.SEEDED_INIT`), built afresh.

Reproducible means across processes too: the generators' draws from the global RNGs are seeded
per entry; the few that depend on the order of sets of strings (hash randomization) are
`catalog.CARRIED`, whose verifiers score against the task's answer (`carried`); for the others
`resolve` checks that the rebuilt entry's question is the task's.

Some entries carry no answer (the scorer checks validity: a coloring, a move sequence): their
oracle is built here (`catalog.ORACLES`): from the entry's metadata, or by a small solver.
`undrawable` says which entries `make` must skip (an empty answer; an unevaluated integral).
"""

from __future__ import annotations

import ast
import collections
import copy
import functools
import json
import random
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy

from tempering.verdict import InfrastructureError
from tempering.tasks.reasoning.catalog import CARRIED, FIXED, SEEDED_INIT

if TYPE_CHECKING:  # reasoning_gym is imported when a dataset is first built (`library`)
    from reasoning_gym.dataset import ProceduralDataset


@dataclass(frozen=True, eq=False)  # hashed by identity: the entry dict inside is not hashable
class Built:
    dataset: ProceduralDataset  # its score_answer and config
    entry: dict
    oracle: str


def ref_text(dataset: str, seed: int, config: dict | None = None) -> str:
    return json.dumps({"dataset": dataset, "seed": seed, "config": config or {}}, sort_keys=True)


def parse_ref(ref: str) -> tuple[str, int, str]:
    """(dataset, seed, config as canonical JSON): the arguments of `build`."""
    data = json.loads(ref)
    return data["dataset"], int(data["seed"]), json.dumps(data.get("config") or {}, sort_keys=True)


def build(dataset: str, seed: int, config: str = "{}") -> Built:
    """The entry of `dataset` at `seed` (cached per process)."""
    return _build(dataset, int(seed), config)


_GLOBAL_RNGS = threading.Lock()


@functools.lru_cache(maxsize=4096)
def _build(dataset: str, seed: int, config: str) -> Built:
    rg = library()
    # Generators may draw from the global RNGs (codeio's reference solutions call np.random):
    # seeded from the entry's seed, and restored, so that an entry is the same every time.
    with _GLOBAL_RNGS:
        np_state, py_state = numpy.random.get_state(), random.getstate()
        numpy.random.seed(seed % 2 ** 32)
        random.seed(seed)
        try:
            if dataset in SEEDED_INIT:
                ds = rg.create_dataset(dataset, seed=seed, size=1, **json.loads(config))
            else:  # the same entry without reloading the dataset's files (arc_agi: 0.4 s -> 6 ms)
                ds = copy.copy(_instance(dataset, config))
                ds.seed = seed
            entry = ds[0]
        finally:
            numpy.random.set_state(np_state)
            random.setstate(py_state)
    answer = entry["answer"]
    oracle = ORACLE_BUILDERS[dataset](entry) if dataset in ORACLE_BUILDERS else ("" if answer is None else str(answer))
    return Built(ds, entry, oracle)


@functools.lru_cache(maxsize=1024)
def carried(dataset: str, config: str, answer: str) -> Built:
    """An entry of a `CARRIED` dataset as its verifier sees it: the task's answer, no question or
    metadata (its scorer reads only the answer), and the dataset object for its scorer."""
    return Built(_instance(dataset, config), {"question": "", "answer": answer, "metadata": {}}, answer)


@functools.lru_cache(maxsize=256)
def _instance(dataset: str, config: str) -> ProceduralDataset:
    """The dataset object (with seed 0), its files loaded once per process."""
    return library().create_dataset(dataset, seed=0, size=1, **json.loads(config))


def resolve(dataset: str, seed: int, config: str, prompt: str, answer: str) -> Built:
    """What a task's verifier scores against: the entry rebuilt from its ref, which must be the
    entry the task was made from (its question opens the prompt), or, for `CARRIED` datasets,
    the answer the task carries."""
    if dataset in CARRIED:
        return carried(dataset, config, answer)
    built = build(dataset, seed, config)
    if not prompt.startswith(built.entry["question"].rstrip()):
        raise InfrastructureError(f"reasoning/{dataset} (seed {seed}): the entry rebuilt from the task's ref has "
                                  "another question than the task (the generator is not reproducible here)")
    return built


def undrawable(dataset: str, built: Built) -> str:
    """Why `make` must not draw this entry ("" when it may)."""
    if not built.oracle.strip():
        return "its answer is empty, and an empty reply is junk"
    if dataset in ("simple_integration", "intermediate_integration") and "Integral" in built.oracle:
        return "sympy could not integrate it: its answer is the unevaluated Integral(...)"
    return ""


@functools.cache
def library():
    """reasoning_gym, imported on first use (a second, sympy included) and hardened once."""
    import reasoning_gym
    from reasoning_gym.factory import DATASETS

    for name, fix in FIXED.items():
        if fix.safe_eval:  # a module-level `eval` shadows the builtin for that module's code only
            setattr(sys.modules[DATASETS[name][0].__module__], "eval", _literal_eval)
    # The bf generator's compiler prints progress dots and its interpreter the program's output:
    # not ours to print from a rollout worker.
    from reasoning_gym.code.contrib.bfit import Interpreter
    from reasoning_gym.code.contrib.bfit.Compiler import Optimizer
    for module in (Interpreter, Optimizer):
        setattr(module, "print", _silent)
    return reasoning_gym


def _literal_eval(source, *args, **kwargs):
    """What the hardened scorers get for eval(): literals only, no names, calls or operators."""
    if not isinstance(source, str) or args or kwargs:
        raise TypeError("eval is restricted to one literal string")
    return ast.literal_eval(source)


def _silent(*args, **kwargs) -> None:
    pass


# ---------------------------------------------------------------- oracles for answerless entries

def _graph_color(entry: dict) -> str:
    coloring = entry["metadata"]["possible_answer"]
    return json.dumps({str(vertex): color for vertex, color in coloring.items()})


def _rubiks_cube(entry: dict) -> str:
    return entry["metadata"]["example_correct_answer"]


def _rush_hour(entry: dict) -> str:
    """A shortest solution in one-square slides, by breadth-first search over the positions of
    the board's pieces (the library's `Board` reads the board; pieces are named as the question
    shows them: 'A' + index, walls last), written as the question asks ('B+2 A+1 ...')."""
    from reasoning_gym.games.rush_hour import BOARD_SIZE, TARGET, Board, H

    pieces = Board(entry["metadata"]["board_config"])._pieces
    sizes = [p.size for p in pieces]
    strides = [p.stride for p in pieces]
    movable = [i for i, p in enumerate(pieces) if not p.fixed]
    start = tuple(p.position for p in pieces)

    def cells(pos: int, i: int) -> range:
        return range(pos, pos + sizes[i] * strides[i], strides[i])

    parent: dict[tuple, tuple | None] = {start: None}
    queue = collections.deque([start])
    while queue:
        state = queue.popleft()
        if state[0] == TARGET:
            break
        taken = {c for i, pos in enumerate(state) for c in cells(pos, i)}
        for i in movable:
            pos, size = state[i], sizes[i]
            if strides[i] == H:
                col = pos % BOARD_SIZE
                steps = [(-1, pos - 1)] if col > 0 else []
                steps += [(1, pos + size)] if col + size < BOARD_SIZE else []
            else:
                steps = [(-1, pos - BOARD_SIZE)] if pos - BOARD_SIZE >= 0 else []
                steps += [(1, pos + size * BOARD_SIZE)] if pos + size * BOARD_SIZE < BOARD_SIZE ** 2 else []
            for step, cell in steps:
                if cell not in taken:
                    nxt = state[:i] + (pos + step * strides[i],) + state[i + 1:]
                    if nxt not in parent:
                        parent[nxt] = (state, i, step)
                        queue.append(nxt)
    else:
        raise ValueError("rush_hour: no solution found for the board")
    moves: list[list] = []  # [piece, steps], consecutive slides of one piece one way merged
    while parent[state] is not None:
        state, i, step = parent[state]
        if moves and moves[-1][0] == i and (moves[-1][1] > 0) == (step > 0):
            moves[-1][1] += step
        else:
            moves.append([i, step])
    return " ".join(f"{chr(ord('A') + i)}{steps:+d}" for i, steps in reversed(moves))


def _boxnet(entry: dict) -> str:
    """Each box walks a shortest path of adjacent squares to the square of its target, then onto
    the target: one action per step, written as the question's JSON list of action dicts."""
    state: dict[str, list[str]] = entry["metadata"]["initial_state"]
    squares = {key: tuple(float(v) for v in key.split("_")) for key in state}
    where = {item: key for key, items in state.items() for item in items}
    plan = []
    for box in sorted(i for i in where if i.startswith("box_")):
        goal = where["target_" + box[4:]]
        path = _grid_path(squares, where[box], goal)
        for here, there in zip(path, path[1:]):
            plan.append({_agent(squares[here]): f"move({box}, square{_coords(squares[there])})"})
        plan.append({_agent(squares[goal]): f"move({box}, target_{box[4:]})"})
    return json.dumps(plan)


def _grid_path(squares: dict[str, tuple[float, float]], start: str, goal: str) -> list[str]:
    parent: dict[str, str | None] = {start: None}
    queue = collections.deque([start])
    while queue:
        key = queue.popleft()
        if key == goal:
            break
        x, y = squares[key]
        for other, (u, v) in squares.items():
            if abs(u - x) + abs(v - y) == 1 and other not in parent:
                parent[other] = key
                queue.append(other)
    path = [goal]
    while parent[path[-1]] is not None:
        path.append(parent[path[-1]])
    return path[::-1]


def _coords(xy: tuple[float, float]) -> str:
    return f"[{xy[0]}, {xy[1]}]"


def _agent(xy: tuple[float, float]) -> str:
    return f"Agent{_coords(xy)}"


ORACLE_BUILDERS = {"graph_color": _graph_color, "rubiks_cube": _rubiks_cube, "rush_hour": _rush_hour,
                   "boxnet": _boxnet}
