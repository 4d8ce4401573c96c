"""`python -m tempering.tasks.terminal`: build the generated tasks, list the tasks, write some as folders.

    python -m tempering.tasks.terminal build [--offline-ok]
    python -m tempering.tasks.terminal list [--kind hand-written|generated] [--json]
    python -m tempering.tasks.terminal materialize DEST [NAME...] [--kind ...]   # no NAME: all

`build` (scripts/setup.sh runs it) fetches the upstream libraries from PyPI into the cache,
verifies them against the lock and materialises the generated tasks; with `--offline-ok` a
library that cannot be downloaded is one line on stderr and exit 0 (the generated tasks are
then left out), where without it that is exit 1. A hash mismatch is always exit 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from tempering.errors import UserError
from tempering.tasks.terminal import catalog, generated, upstream


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tempering.tasks.terminal", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="fetch the upstream libraries into the cache and build the generated tasks")
    b.add_argument("--offline-ok", action="store_true", help="a library that cannot be downloaded is not an error")
    ls = sub.add_parser("list", help="one line per task (name, kind, difficulty, category, title)")
    ls.add_argument("--kind", choices=[catalog.HAND_WRITTEN, catalog.GENERATED])
    ls.add_argument("--json", action="store_true", help="one JSON object per task")
    m = sub.add_parser("materialize", help="write tasks as Harbor folders DEST/<name>")
    m.add_argument("dest")
    m.add_argument("names", nargs="*")
    m.add_argument("--kind", choices=[catalog.HAND_WRITTEN, catalog.GENERATED])
    m.add_argument("--overwrite", action="store_true")
    args = p.parse_args(argv)
    try:
        return _run(args)
    except upstream.Offline as e:
        print(f"tempering terminal: {e}; the generated tasks are left out until it can be fetched", file=sys.stderr)
        return 0 if getattr(args, "offline_ok", False) else 1
    except (UserError, KeyError, FileExistsError) as e:
        print(f"error: {e.args[0] if isinstance(e, KeyError) else e}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    if args.command == "build":
        print(generated.build(log=lambda line: print(f"tempering terminal: {line}", file=sys.stderr)))
        return 0
    if args.command == "list":
        for t in catalog.tasks(args.kind):
            if args.json:
                print(json.dumps(dataclasses.asdict(t)))
            else:
                print(f"{t.name:44s} {t.kind:12s} {t.difficulty:6s} {t.category:16s} {t.title}")
        return 0
    for name in args.names or catalog.names(args.kind):
        print(catalog.materialize(name, args.dest, overwrite=args.overwrite))
    return 0


if __name__ == "__main__":
    sys.exit(main())
