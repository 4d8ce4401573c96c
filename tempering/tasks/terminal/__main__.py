"""`python -m tempering.tasks.terminal`: list the terminal tasks or write some as Harbor folders.

    python -m tempering.tasks.terminal list [--kind hand-written|generated] [--json]
    python -m tempering.tasks.terminal materialize DEST [NAME...] [--kind ...]   # no NAME: all
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from tempering.tasks.terminal import catalog


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tempering.tasks.terminal", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="one line per task (name, kind, difficulty, category, title)")
    ls.add_argument("--kind", choices=[catalog.HAND_WRITTEN, catalog.GENERATED])
    ls.add_argument("--json", action="store_true", help="one JSON object per task")
    m = sub.add_parser("materialize", help="write tasks as Harbor folders DEST/<name>")
    m.add_argument("dest")
    m.add_argument("names", nargs="*")
    m.add_argument("--kind", choices=[catalog.HAND_WRITTEN, catalog.GENERATED])
    m.add_argument("--overwrite", action="store_true")
    args = p.parse_args(argv)
    if args.command == "list":
        for t in catalog.tasks(args.kind):
            if args.json:
                print(json.dumps(dataclasses.asdict(t)))
            else:
                print(f"{t.name:44s} {t.kind:12s} {t.difficulty:6s} {t.category:16s} {t.title}")
        return 0
    names = args.names or catalog.names(args.kind)
    for name in names:
        print(catalog.materialize(name, args.dest, overwrite=args.overwrite))
    return 0


if __name__ == "__main__":
    sys.exit(main())
