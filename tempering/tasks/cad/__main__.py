"""Look at a part from the shell: its prompt, its reference program, its target's measures, and
optionally the target as an STL file (trimesh writes it).

    python -m tempering.tasks.cad KIND [--seed N] [--stl FILE]
"""

from __future__ import annotations

import argparse
import sys

from tempering.tasks.cad import geometry as g
from tempering.tasks.cad.parts import KINDS, part, target


def write_stl(solid, path: str) -> None:
    import trimesh

    mesh = solid.to_mesh64()
    trimesh.Trimesh(vertices=mesh.vert_properties[:, :3], faces=mesh.tri_verts, process=False).export(path)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tempering.tasks.cad", description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=sorted(KINDS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stl", help="write the target mesh to this STL file")
    args = parser.parse_args(argv)
    p = part(args.kind, args.seed)
    want, _ = target(args.kind, args.seed)
    lo, hi = g.bounds(want)
    print(p.prompt, "", "reference:", *p.reference, "", sep="\n")
    print(f"target: volume {g.fmt(g.volume(want))} mm^3, bounding box {lo.tolist()}..{hi.tolist()}, "
          f"through-holes {g.genus(want)}, material {p.material}")
    print(g.render(want, "top"))
    if args.stl:
        write_stl(want, args.stl)
        print(f"wrote {args.stl}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
