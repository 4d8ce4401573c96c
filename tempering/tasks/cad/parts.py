"""The seeded part generators: one per part kind, a seed -> a `Part`.

A part is a construction program in the modelling tools' own language (`box plate 40 30 5`,
`difference plate plate hole`, ...) with its dimensions drawn from the seed, the material, and
the design intent: what a designer would say about it ("a 40 x 30 x 5 mm aluminium plate with
four 4 mm through holes, each centred 5 mm in from both edges at a corner"). The intent states
the part's overall sizes, each feature's size, count, spacing and where it sits relative to the
part (insets, centred, on a circle of a given diameter), the material and the coordinate frame;
it never states the program, absolute coordinates of features that the model must work out
(hole centres, pocket corners), or the mesh. Every number in the prompt is one of `Part.stated`.

`target(kind, seed)` builds the part by running its program on a fresh `Scene` (so it is
tessellated exactly as the model's tools would build it), cached per process; `stock` is the
part before its subtractive features (holes, slots, pockets), which the reward's `features`
component compares against. Dimensions sit on a 0.5 mm grid or finer halves, so the positions a
model derives are short decimals.
"""

from __future__ import annotations

import atexit
import functools
import math
import random
from dataclasses import dataclass
from typing import Callable

from manifold3d import Manifold

from tempering.tasks.cad import geometry as g
from tempering.tasks.cad.scene import Scene

MATERIALS = ("aluminium", "steel", "stainless steel", "brass", "titanium", "ABS", "PLA", "nylon")
NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight",
                9: "nine", 10: "ten", 12: "twelve"}

CORNER_FRAME = ("Units are mm. One corner of the part is at the origin; its length runs along +x, its width "
                "along +y and its height along +z.")


@dataclass(frozen=True)
class Part:
    kind: str
    seed: int
    intent: str  # the design intent: the only description of the part the model gets
    frame: str  # where the part sits in the coordinate system
    program: tuple[str, ...]  # tool commands ("box plate 40 30 5"), the last one setting the material
    name: str  # the solid the program leaves as the part
    stock_at: int  # the program's first `stock_at` commands leave `name` as the stock (no holes yet)
    material: str
    holes: int  # through-holes by construction: the part's genus
    stated: tuple[float, ...]  # every number the intent and the frame state

    @property
    def prompt(self) -> str:
        return f"{self.intent}\n{self.frame}\nModel it with the tools and submit the finished part."

    @property
    def reference(self) -> tuple[str, ...]:
        """The oracle: each command as one assistant turn in the compact tool format, then submit."""
        return tuple(f"${line}" for line in self.program) + (f"$submit {self.name}",)

    @property
    def stock_program(self) -> tuple[str, ...]:
        """The part without its subtractive features, in the right material (a wrong answer)."""
        return self.program[: self.stock_at] + (self.program[-1],)


def fmt(x: float) -> str:
    return g.fmt(x)


def _count(n: int) -> str:
    return NUMBER_WORDS.get(n, str(n))


def _sized(x: float, y: float, z: float, material: str, noun: str) -> str:
    """ "An 80 x 40 x 5 mm steel plate" """
    return f"{_a(x).capitalize()} {fmt(x)} x {fmt(y)} x {fmt(z)} mm {material} {noun}"


def _a(n: float) -> str:
    """The article before a number said aloud: "an 8 mm hole", "a 6 mm hole"."""
    s = fmt(n)
    return "an" if s.startswith("8") or s.split(".")[0] in ("11", "18") else "a"


def _pick(rng: random.Random, options) -> float:
    """One of `options`, or 0 when there are none (the generators then draw again)."""
    options = list(options)
    return rng.choice(options) if options else 0


def _steps(lo: float, hi: float, step: float) -> list[float]:
    n = int(math.floor((hi - lo) / step + 1e-9))
    return [lo + i * step for i in range(n + 1)] if hi >= lo else []


# -- the kinds -----------------------------------------------------------------------------------

def plate_holes(rng: random.Random, material: str) -> dict:
    """A rectangular plate with through holes at its four corners, or two on its centre line."""
    while True:
        L = _pick(rng, range(30, 101, 5))
        W = _pick(rng, range(20, int(L) + 1, 5))
        T = _pick(rng, (3, 4, 5, 6, 8, 10))
        d = _pick(rng, (3, 4, 5, 6, 8))
        e = _pick(rng, (4, 5, 6, 8, 10, 12))
        if e >= d / 2 + 2 and 2 * e + d + 3 <= min(W, L):
            break
    corners = rng.random() < 0.6
    program = [f"box plate {L} {W} {T}", f"cylinder hole {d} {T + 2}"]
    if corners:
        intent = (f"{_sized(L, W, T, material, 'plate')} with four {d} mm through holes, one near each corner, each "
                  f"centred {e} mm in from both edges that meet there.")
        program += [f"move hole {e} {e} -1", f"pattern hole 2 2 {fmt(L - 2 * e)} {fmt(W - 2 * e)}"]
        stated, holes = (L, W, T, d, e), 4
    else:
        intent = (f"{_sized(L, W, T, material, 'plate')} with two {d} mm through holes on the centre line "
                  f"along its length, each centred {e} mm from its end of the plate.")
        program += [f"move hole {e} {fmt(W / 2)} -1", f"pattern hole 2 1 {fmt(L - 2 * e)} 0"]
        stated, holes = (L, W, T, d, e), 2
    program.append("difference plate plate hole")
    return dict(intent=intent, frame=CORNER_FRAME, program=program, name="plate", stock_at=1, holes=holes,
                stated=stated)


def plate_grid(rng: random.Random, material: str) -> dict:
    """A plate with a centred rectangular grid of equal through holes at one pitch."""
    nx, ny = _pick(rng, (2, 3, 4, 5)), _pick(rng, (2, 3))
    p = _pick(rng, (8, 10, 12, 15))
    d = _pick(rng, [x for x in (3, 4, 5, 6) if x <= p - 4])
    mx, my = _pick(rng, (5, 6, 7.5, 8, 10)), _pick(rng, (5, 6, 7.5, 8, 10))
    L, W, T = (nx - 1) * p + 2 * mx, (ny - 1) * p + 2 * my, _pick(rng, (3, 4, 5, 6))
    if W > L:
        (nx, mx, L), (ny, my, W) = (ny, my, W), (nx, mx, L)
    intent = (f"{_sized(L, W, T, material, 'plate')} pierced by a grid of {nx} x {ny} through holes "
              f"({nx} along its length, {ny} across it), each {d} mm in diameter, their centres {p} mm apart in "
              "both directions, the grid centred on the plate.")
    program = [f"box plate {fmt(L)} {fmt(W)} {T}", f"cylinder hole {d} {T + 2}", f"move hole {fmt(mx)} {fmt(my)} -1",
               f"pattern hole {nx} {ny} {p} {p}", "difference plate plate hole"]
    return dict(intent=intent, frame=CORNER_FRAME, program=program, name="plate", stock_at=1, holes=nx * ny,
                stated=(L, W, T, nx, ny, d, p))


def block_pocket(rng: random.Random, material: str) -> dict:
    """A block with a rectangular blind pocket centred in its top face, sometimes with a through hole
    in the pocket's floor."""
    while True:
        L = _pick(rng, range(30, 91, 5))
        W = _pick(rng, range(20, int(L) + 1, 5))
        H = _pick(rng, (10, 12, 15, 20, 25, 30))
        a = _pick(rng, range(10, int(L) - 5, 5))
        b = _pick(rng, range(10, int(W) - 5, 5)) if W >= 20 else 0
        depth = _pick(rng, range(3, int(H) - 2))
        if a and b and L - a >= 6 and W - b >= 6:
            break
    program = [f"box block {L} {W} {H}", f"box pocket {a} {b} {depth + 1}",
               f"move pocket {fmt((L - a) / 2)} {fmt((W - b) / 2)} {H - depth}", "difference block block pocket"]
    intent = (f"{_sized(L, W, H, material, 'block')} with a rectangular pocket {a} x {b} mm ({a} along "
              f"the block's length) and {depth} mm deep, centred in its top face.")
    stated, holes = [L, W, H, a, b, depth], 0
    if rng.random() < 0.5:
        d = _pick(rng, [x for x in (4, 5, 6, 8, 10) if x <= min(a, b) - 4])
        program += [f"cylinder hole {d} {H + 2}", f"move hole {fmt(L / 2)} {fmt(W / 2)} -1",
                    "difference block block hole"]
        intent += f" {_a(d).capitalize()} {d} mm hole goes through the block from the centre of the pocket's floor."
        stated.append(d)
        holes = 1
    return dict(intent=intent, frame=CORNER_FRAME, program=program, name="block", stock_at=1, holes=holes,
                stated=tuple(stated))


def bracket_slot(rng: random.Random, material: str) -> dict:
    """An L bracket: a flat base with a rounded-end slot, an upright along one end, sometimes a hole
    through the upright."""
    while True:
        L, W = _pick(rng, range(40, 91, 5)), _pick(rng, range(20, 41, 5))
        T, H = _pick(rng, (3, 4, 5, 6)), _pick(rng, range(25, 61, 5))
        s = _pick(rng, (4, 5, 6, 8))
        ls = _pick(rng, range(12, 31, 2))
        c = _pick(rng, _steps(T + 3 + ls / 2, L - 3 - ls / 2, 2.5))
        if ls >= s + 4 and W >= s + 8 and c > 0:
            break
    st = ls - s  # between the centres of the slot's rounded ends
    program = [f"box base {L} {W} {T}", f"box upright {T} {W} {H}", "union bracket base upright",
               f"box slot {fmt(st)} {s} {T + 2}", f"move slot {fmt(c - st / 2)} {fmt((W - s) / 2)} -1",
               f"cylinder slotend {s} {T + 2}", f"move slotend {fmt(c - st / 2)} {fmt(W / 2)} -1",
               f"pattern slotend 2 1 {fmt(st)} 0", "union slot slot slotend", "difference bracket bracket slot"]
    intent = (f"An L-shaped {material} bracket, {T} mm thick throughout: a flat base {L} mm long and {W} mm wide, "
              f"and an upright {H} mm tall (from the underside of the base) rising from the base's {W} mm wide end "
              f"at x = 0. The base has a slot with fully rounded ends, {s} mm wide and {fmt(ls)} mm long overall, "
              f"running along the base's length, centred across its width, its middle {fmt(c)} mm from the "
              "upright's outer face.")
    stated, holes = [T, L, W, H, s, ls, c, 0], 1
    if rng.random() < 0.5:
        dh = _pick(rng, (4, 5, 6, 8))
        z = _pick(rng, _steps(T + dh / 2 + 3, H - dh / 2 - 3, 2.5))
        if dh <= W - 8 and z > 0:
            program += [f"cylinder hole {dh} {T + 2}", "rotate hole y 90", f"move hole -1 {fmt(W / 2)} {fmt(z)}",
                        "difference bracket bracket hole"]
            intent += (f" {_a(dh).capitalize()} {dh} mm hole goes through the upright, centred across its width, "
                       f"{fmt(z)} mm above the underside of the base.")
            stated += [dh, z]
            holes = 2
    frame = ("Units are mm. The base lies on z = 0 with the bracket's outer corner at the origin, its length along "
             "+x and its width along +y; the upright rises along +z.")
    return dict(intent=intent, frame=frame, program=program, name="bracket", stock_at=3, holes=holes,
                stated=tuple(stated))


def boss_pattern(rng: random.Random, material: str) -> dict:
    """A square plate with a circle of cylindrical bosses on its top face, a hole through each boss
    and the plate."""
    while True:
        S, T = _pick(rng, range(40, 101, 10)), _pick(rng, (4, 5, 6, 8))
        n = _pick(rng, (3, 4, 5, 6, 8))
        db, hb = _pick(rng, (6, 8, 10, 12)), _pick(rng, (3, 4, 5, 6, 8, 10))
        D = _pick(rng, range(20, int(S) - int(db) - 5, 5))
        dh = _pick(rng, [x for x in (3, 4, 5, 6) if x <= db - 3])
        if D / 2 + db / 2 + 3 <= S / 2 and D * math.sin(math.pi / n) >= db + 2:
            break
    program = [f"box plate {S} {S} {T}", f"cylinder boss {db} {hb}", f"move boss {fmt(D / 2)} 0 {T}",
               f"polar boss {n}", f"move boss {fmt(S / 2)} {fmt(S / 2)} 0", "union plate plate boss",
               f"cylinder hole {dh} {T + hb + 2}", f"move hole {fmt(D / 2)} 0 -1", f"polar hole {n}",
               f"move hole {fmt(S / 2)} {fmt(S / 2)} 0", "difference plate plate hole"]
    intent = (f"{_sized(S, S, T, material, 'plate')} with {_count(n)} cylindrical bosses standing on its "
              f"top face, each {db} mm in diameter and {hb} mm tall, equally spaced on {_a(D)} {D} mm diameter "
              "circle centred on the plate, the first boss on the +x side of the centre. "
              f"{_a(dh).capitalize()} {dh} mm hole goes through each boss and the plate beneath it, on the boss's "
              "axis.")
    return dict(intent=intent, frame=CORNER_FRAME, program=program, name="plate", stock_at=6, holes=n,
                stated=(S, T, n, db, hb, D, dh))


def flange_holes(rng: random.Random, material: str) -> dict:
    """A round flange: a disc with a centre bore and a bolt circle of holes."""
    while True:
        Do, T = _pick(rng, range(40, 121, 10)), _pick(rng, (4, 5, 6, 8, 10))
        Dc = _pick(rng, range(10, int(Do) // 2 + 1, 2))
        n, dh = _pick(rng, (3, 4, 5, 6, 8)), _pick(rng, (4, 5, 6, 8))
        D = _pick(rng, range(int(Dc) + int(dh) + 6, int(Do) - int(dh) - 5, 2))
        if D and D * math.sin(math.pi / n) >= dh + 3:
            break
    program = [f"cylinder flange {Do} {T}", f"cylinder bore {Dc} {T + 2}", "move bore 0 0 -1",
               f"cylinder hole {dh} {T + 2}", f"move hole {fmt(D / 2)} 0 -1", f"polar hole {n}",
               "difference flange flange bore hole"]
    intent = (f"A round {material} flange, {Do} mm in diameter and {T} mm thick, with {_a(Dc)} {Dc} mm bore "
              f"through its centre and {_count(n)} {dh} mm bolt holes equally spaced on {_a(D)} {D} mm diameter "
              "circle around it.")
    frame = ("Units are mm. The flange's axis is the z axis and its underside lies on z = 0; the first bolt hole "
             "is on the +x side of the centre.")
    return dict(intent=intent, frame=frame, program=program, name="flange", stock_at=1, holes=n + 1,
                stated=(Do, T, Dc, n, dh, D, 0))


def block_counterbore(rng: random.Random, material: str) -> dict:
    """A block with one or two counterbored through holes on its lengthwise centre line."""
    while True:
        L, W = _pick(rng, range(30, 91, 5)), _pick(rng, range(20, 51, 5))
        H = _pick(rng, (10, 12, 15, 20, 25))
        d = _pick(rng, (4, 5, 6, 8, 10))
        D = d + _pick(rng, (3, 4, 5, 6))
        c = _pick(rng, range(2, int(H) - 4))
        k = _pick(rng, (1, 2))
        p = _pick(rng, range(int(D) + 4, int(L) - int(D) - 3, 2)) if k == 2 else 0
        if W >= D + 6 and L >= D + 6 and (k == 1 or p):
            break
    program = [f"box block {L} {W} {H}", f"cylinder hole {d} {H + 2}", f"cylinder cbore {D} {c + 1}"]
    if k == 1:
        program += [f"move hole {fmt(L / 2)} {fmt(W / 2)} -1", f"move cbore {fmt(L / 2)} {fmt(W / 2)} {H - c}"]
        where = "through the centre of its top face"
        stated = (L, W, H, d, D, c)
    else:
        x = (L - p) / 2
        program += [f"move hole {fmt(x)} {fmt(W / 2)} -1", f"pattern hole 2 1 {p} 0",
                    f"move cbore {fmt(x)} {fmt(W / 2)} {H - c}", f"pattern cbore 2 1 {p} 0"]
        where = f"on the centre line along its length, {p} mm apart and centred on the block, through its top face"
        stated = (L, W, H, d, D, c, p)
    program.append("difference block block hole cbore")
    each = "each " if k == 2 else ""
    intent = (f"{_sized(L, W, H, material, 'block')} with {'a' if k == 1 else 'two'} counterbored "
              f"hole{'s' if k == 2 else ''} {where}: {each}{_a(d)} {d} mm through hole, counterbored {D} mm in "
              f"diameter and {c} mm deep from the top face.")
    return dict(intent=intent, frame=CORNER_FRAME, program=program, name="block", stock_at=1, holes=k,
                stated=stated)


KINDS: dict[str, tuple[Callable[[random.Random, str], dict], str]] = {
    "plate-holes": (plate_holes, "a plate with corner or end holes"),
    "plate-grid": (plate_grid, "a plate with a centred grid of holes"),
    "block-pocket": (block_pocket, "a block with a centred pocket (and maybe a hole in its floor)"),
    "bracket-slot": (bracket_slot, "an L bracket with a slot in its base (and maybe a hole in its upright)"),
    "boss-pattern": (boss_pattern, "a plate with a circle of bored bosses"),
    "flange-holes": (flange_holes, "a round flange with a bore and a bolt circle"),
    "block-counterbore": (block_counterbore, "a block with counterbored holes"),
}


@functools.lru_cache(maxsize=1024)
def part(kind: str, seed: int) -> Part:
    """The part of `kind` that `seed` makes (the same in every process)."""
    if kind not in KINDS:
        raise KeyError(f"unknown part kind {kind!r} (known: {', '.join(KINDS)})")
    rng = random.Random(f"cad/{kind}/{seed}")
    material = rng.choice(MATERIALS)
    spec = KINDS[kind][0](rng, material)
    program = tuple(spec.pop("program")) + (f"material {spec['name']} {material}",)
    stated = tuple(float(x) for x in spec.pop("stated"))
    return Part(kind=kind, seed=seed, program=program, material=material, stated=stated, **spec)


def build(program: tuple[str, ...]) -> Scene:
    scene = Scene()
    for line in program:
        command, _, args = line.partition(" ")
        scene.run(command, args)
    return scene


@functools.lru_cache(maxsize=64)  # cleared at exit: nanobind reports solids still alive then as leaks
def target(kind: str, seed: int) -> tuple[Manifold, Manifold]:
    """(the part, its stock) as solids; built once per process and kept for later samples."""
    p = part(kind, seed)
    return build(p.program).solid(p.name), build(p.program[: p.stock_at]).solid(p.name)


atexit.register(target.cache_clear)
