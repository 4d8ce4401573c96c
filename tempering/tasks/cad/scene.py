"""`Scene`: an episode's named solids, and the modelling tools that act on it.

Every tool takes one line of space-separated arguments (`$box plate 40 30 5` in the compact tool
format; `{"args": "plate 40 30 5"}` as JSON), lengths in mm and angles in degrees. Primitives
are made at the origin and moved into place; booleans use their operands up (the result may take
an operand's name); a solid's material travels with it (a boolean's result takes the first one
its operands have). `submit NAME` names the solid to grade and ends the episode; nothing changes
after it, not even by later calls of the same turn. A call that cannot be carried out raises
`ToolError` with what to fix, and changes nothing.

A scene pickles as its construction log (the commands that changed it, in order) and what was
submitted: the verifier runs in another process and rebuilds the solids by replaying the log,
so no live geometry crosses processes. A part's target is built by the same commands
(`parts.py`), so the target and the model's solids are tessellated alike.
"""

from __future__ import annotations

import math
import re
from typing import Callable

from manifold3d import Manifold, OpType

from tempering.tasks.host import Param, Tool, ToolError
from tempering.records import Budget, ExecResult
from tempering.tasks.cad import geometry as g

MATERIALS = ("aluminium", "steel", "stainless steel", "brass", "copper", "titanium", "ABS", "PLA", "nylon")
_ALIASES = {"aluminum": "aluminium", "stainless": "stainless steel", "stainless-steel": "stainless steel"}
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,31}")
MAX_SOLIDS = 64
MAX_COPIES = 64  # of a pattern
MAX_SIZE = 2000.0  # mm, any dimension or offset
MAX_TRIANGLES = 200_000  # of one solid: an episode must not build something the verifier cannot afford
MAX_CHANGES = 200  # commands that change the scene: the verifier replays them all


class Scene:
    """Named solids (manifold3d `Manifold`s) with their materials, as one episode built them."""

    def __init__(self) -> None:
        self.solids: dict[str, Manifold] = {}
        self.materials: dict[str, str] = {}
        self.log: list[str] = []  # the commands that changed the scene, "box plate 40 30 5"
        self.submitted: str | None = None

    def final_state(self) -> Scene:
        """What the verifier judges: the scene as the episode left it."""
        return self

    # -- the tools' entry point -------------------------------------------------------------
    def run(self, command: str, args: str) -> str:
        """Carry out `command` with its argument line; -> what the model reads. Raises ToolError."""
        spec = COMMANDS.get(command)
        if spec is None:
            raise ToolError(f"unknown modelling command {command!r}")
        if spec.changes and self.submitted is not None:
            raise ToolError(f"{self.submitted} is submitted: the scene can no longer change")
        if spec.changes and len(self.log) >= MAX_CHANGES:
            raise ToolError(f"the scene has had its {MAX_CHANGES} changes; submit the part")
        words = args.split()
        output = spec.method(self, words)
        if spec.changes:
            self.log.append(" ".join([command, *words]))
        return output

    def solid(self, name: str) -> Manifold:
        if name not in self.solids:
            have = ", ".join(self.solids) if self.solids else "none yet"
            raise ToolError(f"no solid named {name!r} (the solids: {have})")
        return self.solids[name]

    def whole(self) -> Manifold:
        return g.union(self.solids.values())

    def describe(self, name: str) -> str:
        """What `measure NAME` says of a solid: size, extent, volume, genus, pieces, material."""
        return self._describe(name, self.solid(name))

    def __getstate__(self) -> dict:
        return {"log": list(self.log), "submitted": self.submitted}

    def __setstate__(self, state: dict) -> None:
        self.__init__()
        for line in state["log"]:
            command, _, args = line.partition(" ")
            self.run(command, args)
        self.submitted = state["submitted"]

    # -- primitives -------------------------------------------------------------------------
    def _box(self, w: list[str]) -> str:
        _arity(w, 4, "box")
        name, (sx, sy, sz) = _new_name(w[0], "box"), _sizes(w[1:], "box", ("SX", "SY", "SZ"))
        return self._put(name, g.box(sx, sy, sz), f"box {g.fmt(sx)} x {g.fmt(sy)} x {g.fmt(sz)}", fresh=True)

    def _cylinder(self, w: list[str]) -> str:
        _arity(w, 3, "cylinder")
        name, (d, h) = _new_name(w[0], "cylinder"), _sizes(w[1:], "cylinder", ("D", "H"))
        return self._put(name, g.cylinder(d, h), f"cylinder {g.fmt(d)} across, {g.fmt(h)} tall", fresh=True)

    def _sphere(self, w: list[str]) -> str:
        _arity(w, 2, "sphere")
        name, (d,) = _new_name(w[0], "sphere"), _sizes(w[1:], "sphere", ("D",))
        return self._put(name, g.sphere(d), f"sphere {g.fmt(d)} across", fresh=True)

    # -- transforms -------------------------------------------------------------------------
    def _move(self, w: list[str]) -> str:
        _arity(w, 4, "move")
        m, d = self.solid(w[0]), _numbers(w[1:], "move", ("DX", "DY", "DZ"))
        return self._put(w[0], m.translate(d), f"moved by ({', '.join(g.fmt(x) for x in d)})")

    def _rotate(self, w: list[str]) -> str:
        _arity(w, 3, "rotate")
        m, axis = self.solid(w[0]), w[1].lower()
        if axis not in ("x", "y", "z"):
            raise ToolError(f"rotate: AXIS must be x, y or z, got {w[1]!r}")
        (deg,) = _numbers(w[2:], "rotate", ("DEGREES",))
        angles = [deg if a == axis else 0.0 for a in "xyz"]
        return self._put(w[0], m.rotate(angles), f"rotated {g.fmt(deg)} degrees about the {axis} axis")

    def _scale(self, w: list[str]) -> str:
        _arity(w, (2, 4), "scale")
        m = self.solid(w[0])
        f = _sizes(w[1:], "scale", ("FACTOR",) if len(w) == 2 else ("FX", "FY", "FZ"))
        f = f * 3 if len(f) == 1 else f
        return self._put(w[0], m.scale(f), f"scaled by ({', '.join(g.fmt(x) for x in f)})")

    def _copy(self, w: list[str]) -> str:
        _arity(w, 2, "copy")
        m, new = self.solid(w[0]), _new_name(w[1], "copy")
        return self._put(new, m, f"a copy of {w[0]}", fresh=True, material=self.materials.get(w[0]))

    def _delete(self, w: list[str]) -> str:
        _arity(w, 1, "delete")
        self.solid(w[0])
        del self.solids[w[0]]
        self.materials.pop(w[0], None)
        return f"deleted {w[0]}"

    def _pattern(self, w: list[str]) -> str:
        _arity(w, 5, "pattern")
        m = self.solid(w[0])
        nx, ny = _count(w[1], "pattern", "NX"), _count(w[2], "pattern", "NY")
        dx, dy = _numbers(w[3:], "pattern", ("DX", "DY"))
        if nx * ny > MAX_COPIES:
            raise ToolError(f"pattern: at most {MAX_COPIES} copies, asked for {nx * ny}")
        copies = [m.translate([i * dx, j * dy, 0]) for i in range(nx) for j in range(ny)]
        return self._put(w[0], g.union(copies),
                         f"{nx} x {ny} copies, {g.fmt(dx)} apart in x and {g.fmt(dy)} apart in y")

    def _polar(self, w: list[str]) -> str:
        _arity(w, (2, 3), "polar")
        m, n = self.solid(w[0]), _count(w[1], "polar", "N")
        if n > MAX_COPIES:
            raise ToolError(f"polar: at most {MAX_COPIES} copies, asked for {n}")
        (step,) = _numbers(w[2:], "polar", ("STEP_DEGREES",)) if len(w) == 3 else (360.0 / n,)
        copies = [m.rotate([0, 0, k * step]) for k in range(n)]
        return self._put(w[0], g.union(copies), f"{n} copies, {g.fmt(step)} degrees apart about the z axis")

    # -- booleans ---------------------------------------------------------------------------
    def _boolean(self, op: str, w: list[str]) -> str:
        if len(w) < 3:
            raise ToolError(f"{op} takes {_DOCS[op][0]}: the result's name, then two solids or more; "
                            f"got {_plural(len(w), 'argument')}")
        new, operands = _new_name(w[0], op), w[1:]
        if len(set(operands)) != len(operands):
            raise ToolError(f"{op}: each solid may appear once")
        solids = [self.solid(n) for n in operands]
        kind = {"union": OpType.Add, "difference": OpType.Subtract, "intersection": OpType.Intersect}[op]
        result = Manifold.batch_boolean(solids, kind)
        self._check(new, result)
        material = next((self.materials[n] for n in operands if n in self.materials), None)
        for n in operands:
            del self.solids[n]
            self.materials.pop(n, None)
        sign = {"union": " + ", "difference": " - ", "intersection": " & "}[op]
        return self._put(new, result, sign.join(operands), fresh=True, material=material)

    def _union(self, w: list[str]) -> str:
        return self._boolean("union", w)

    def _difference(self, w: list[str]) -> str:
        return self._boolean("difference", w)

    def _intersection(self, w: list[str]) -> str:
        return self._boolean("intersection", w)

    # -- the rest ---------------------------------------------------------------------------
    def _material(self, w: list[str]) -> str:
        if len(w) < 2:
            raise ToolError(f"material takes NAME MATERIAL (one of: {', '.join(MATERIALS)}), "
                            f"got {_plural(len(w), 'argument')}")
        self.solid(w[0])
        material = canonical_material(" ".join(w[1:]))
        if material is None:
            raise ToolError(f"material: unknown material {' '.join(w[1:])!r} (known: {', '.join(MATERIALS)})")
        self.materials[w[0]] = material
        return f"{w[0]} is {material}"

    def _measure(self, w: list[str]) -> str:
        _arity(w, (0, 1), "measure")
        if w:
            return self.describe(w[0])
        if not self.solids:
            return "the scene is empty"
        lines = [self._describe(n, m) for n, m in self.solids.items()]
        if len(self.solids) > 1:
            lines.append(self._describe("whole scene", self.whole(), material=False))
        return "\n".join(lines)

    def _render(self, w: list[str]) -> str:
        if not 1 <= len(w) <= 3 or w[0].lower() not in g.VIEWS:
            raise ToolError(f"render takes {_DOCS['render'][0]}: VIEW is top, front or side; without NAME, "
                            "the whole scene")
        view, name, cell = w[0].lower(), None, None
        for x in w[1:]:
            if _is_number(x) and cell is None:
                (cell,) = _sizes([x], "render", ("CELL_MM",))
            elif name is None:
                name = x
            else:
                raise ToolError(f"render takes {_DOCS['render'][0]}")
        m = self.solid(name) if name is not None else self.whole()
        try:
            picture = g.render(m, view, cell)
        except ValueError as e:
            raise ToolError(f"render: {e}") from None
        return f"{name or 'whole scene'}, {picture}"

    def _submit(self, w: list[str]) -> str:
        if not w and len(self.solids) == 1:
            w = list(self.solids)
        if len(w) != 1:
            have = ", ".join(self.solids) if self.solids else "none yet"
            raise ToolError(f"submit takes the NAME of the finished part (the solids: {have})")
        self.solid(w[0])
        self.submitted = w[0]
        return f"submitted {w[0]}"

    # -- helpers ----------------------------------------------------------------------------
    def _check(self, name: str, m: Manifold) -> None:
        if m.num_tri() > MAX_TRIANGLES:
            raise ToolError(f"{name} would have {m.num_tri()} triangles, more than {MAX_TRIANGLES}; "
                            "build something simpler")
        if name not in self.solids and len(self.solids) >= MAX_SOLIDS:
            raise ToolError(f"the scene holds {MAX_SOLIDS} solids already; combine or delete some")

    def _put(self, name: str, m: Manifold, what: str, fresh: bool = False, material: str | None = None) -> str:
        """Store `m` as `name`. `fresh`: a new solid (it replaces any of that name, and has
        `material`); otherwise `name`'s solid transformed (it keeps its material)."""
        self._check(name, m)
        note = " (replacing the previous one)" if fresh and name in self.solids else ""
        self.solids[name] = m
        if fresh:
            self.materials.pop(name, None)
            if material:
                self.materials[name] = material
        return f"{name}: {what}{note}; {self._extent(m)}"

    @staticmethod
    def _extent(m: Manifold) -> str:
        b = g.bounds(m)
        if b is None:
            return "empty"
        lo, hi = b
        box = ", ".join(f"{a} {g.fmt(lo[i])}..{g.fmt(hi[i])}" for i, a in enumerate("xyz"))
        return f"{box}; volume {g.fmt(g.volume(m))}"

    def _describe(self, name: str, m: Manifold, material: bool = True) -> str:
        b = g.bounds(m)
        if b is None:
            return f"{name}: empty"
        size = " x ".join(g.fmt(x) for x in b[1] - b[0])
        pieces = len(m.decompose())
        mat = f"; material {self.materials.get(name, 'none')}" if material else ""
        return (f"{name}: size {size}; {self._extent(m)}; through-holes (genus) {g.genus(m)}"
                f"{f'; {pieces} separate pieces' if pieces > 1 else ''}{mat}")


def canonical_material(text: str) -> str | None:
    key = " ".join(text.lower().split())
    key = _ALIASES.get(key, key)
    return next((m for m in MATERIALS if m.lower() == key), None)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _new_name(name: str, command: str) -> str:
    if not NAME.fullmatch(name):
        raise ToolError(f"{command}: {name!r} is not a usable name (a letter, then letters, digits, '_' or '-'; "
                        "at most 32)")
    return name


def _arity(w: list[str], n: int | tuple[int, ...], command: str) -> None:
    if len(w) not in ((n,) if isinstance(n, int) else n):
        raise ToolError(f"{command} takes {_DOCS[command][0]}, got {_plural(len(w), 'argument')}"
                        f"{': ' + ' '.join(w) if w else ''}")


def _is_number(x: str) -> bool:
    try:
        return math.isfinite(float(x))
    except ValueError:
        return False


def _numbers(w: list[str], command: str, names: tuple[str, ...]) -> tuple[float, ...]:
    out = []
    for x, n in zip(w, names, strict=True):
        if not _is_number(x):
            raise ToolError(f"{command}: {n} must be a number, got {x!r}")
        if abs(float(x)) > MAX_SIZE:
            raise ToolError(f"{command}: {n} = {x} is beyond the {g.fmt(MAX_SIZE)} mm this workshop handles")
        out.append(float(x))
    return tuple(out)


def _sizes(w: list[str], command: str, names: tuple[str, ...]) -> tuple[float, ...]:
    values = _numbers(w, command, names)
    for x, n in zip(values, names):
        if x <= 0:
            raise ToolError(f"{command}: {n} must be more than 0, got {g.fmt(x)}")
    return values


def _count(x: str, command: str, name: str) -> int:
    if not x.isdigit() or int(x) < 1:
        raise ToolError(f"{command}: {name} must be a whole number of at least 1, got {x!r}")
    return int(x)


class _Command:
    def __init__(self, method: Callable[[Scene, list[str]], str], changes: bool):
        self.method, self.changes = method, changes


COMMANDS: dict[str, _Command] = {
    **{c: _Command(getattr(Scene, f"_{c}"), True) for c in (
        "box", "cylinder", "sphere", "move", "rotate", "scale", "copy", "delete", "pattern", "polar",
        "union", "difference", "intersection", "material")},
    **{c: _Command(getattr(Scene, f"_{c}"), False) for c in ("measure", "render", "submit")},
}
# name -> (argument usage, description) of each tool the model sees
_DOCS = {
    "box": ("NAME SX SY SZ", "Add a box named NAME from the origin to (SX, SY, SZ) mm, e.g. `plate 40 30 5`."),
    "cylinder": ("NAME D H", "Add a cylinder of diameter D and height H mm along +z, its bottom face centred on "
                             "the origin, e.g. `hole 4 7`."),
    "sphere": ("NAME D", "Add a sphere of diameter D mm centred on the origin."),
    "move": ("NAME DX DY DZ", "Translate a solid by (DX, DY, DZ) mm."),
    "rotate": ("NAME AXIS DEGREES", "Rotate a solid about the x, y or z axis through the origin (right-hand "
                                     "rule), e.g. `pin y 90` turns a +z cylinder to +x."),
    "scale": ("NAME FACTOR | NAME FX FY FZ", "Scale a solid about the origin."),
    "copy": ("NAME NEW", "Copy a solid (and its material) under a new name."),
    "delete": ("NAME", "Remove a solid."),
    "pattern": ("NAME NX NY DX DY", "Replace a solid by a grid of NX x NY copies, DX mm apart in x and DY mm "
                                    "apart in y, starting where it is."),
    "polar": ("NAME N [STEP_DEGREES]", "Replace a solid by N copies turned about the z axis through the origin, "
                                       "STEP_DEGREES apart (default 360/N), starting where it is."),
    "union": ("NEW A B [C ...]", "Join solids into NEW; the operands are used up (NEW may reuse a name)."),
    "difference": ("NEW A B [C ...]", "NEW = A minus B (and C ...); the operands are used up (NEW may reuse "
                                      "a name), e.g. `plate plate holes`."),
    "intersection": ("NEW A B [C ...]", "NEW = the common part of the solids; the operands are used up."),
    "material": ("NAME MATERIAL", f"Set a solid's material: {', '.join(MATERIALS)}."),
    "measure": ("[NAME]", "Volume (mm^3), bounding box, through-holes (genus) and material of a solid, or of "
                          "every solid and the whole scene."),
    "render": ("VIEW [NAME] [CELL_MM]", "An ASCII silhouette ('#' solid, '.' empty) of a solid or the whole "
                                        "scene from the top (x right, y up), front (x right, z up) or side "
                                        "(y right, z up)."),
}


def _tool(command: str) -> Tool:
    usage, doc = _DOCS[command]

    def call(args: dict[str, str], host: object, budget: Budget, turn: int) -> tuple[str, ExecResult | None]:
        if not isinstance(host, Scene):
            raise ToolError(f"{command}: this episode has no 3D scene")
        return host.run(command, args["args"]), None

    call.__name__ = f"cad_{command}"
    return Tool(command, doc, (Param("args", f"{usage}, separated by spaces"),), call)


def _submit_tool() -> Tool:
    def call(args: dict[str, str], host: object, budget: Budget, turn: int) -> tuple[str, ExecResult | None]:
        if not isinstance(host, Scene):
            raise ToolError("submit: this episode has no 3D scene")
        return host.run("submit", args["name"]), None

    return Tool("submit", "Submit the named solid as the finished part; the episode ends and it is graded.",
                (Param("name", "the solid to grade"),), call, ends_episode=True)


TOOLS: dict[str, Tool] = {**{c: _tool(c) for c in _DOCS}, "submit": _submit_tool()}
