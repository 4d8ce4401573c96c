#!/bin/bash
cat > /app/todo.py <<'EOF'
"""A to-do list kept in a JSON file."""

import argparse
import json
import os
import sys


def load(path):
    if not os.path.exists(path):
        return {"next_id": 1, "items": []}
    with open(path) as f:
        return json.load(f)


def save(path, data):
    with open(path, "w") as f:
        json.dump(data, f)


def main(argv=None):
    p = argparse.ArgumentParser(prog="todo")
    p.add_argument("--db", default="todo.json")
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("add")
    a.add_argument("text", nargs="+")
    ls = sub.add_parser("list")
    ls.add_argument("--all", action="store_true")
    for name in ("done", "remove"):
        sub.add_parser(name).add_argument("id", type=int)
    args = p.parse_args(argv)
    data = load(args.db)
    if args.command == "add":
        n = data["next_id"]
        data["items"].append({"id": n, "text": " ".join(args.text), "done": False})
        data["next_id"] = n + 1
        save(args.db, data)
        print(f"added {n}")
    elif args.command == "list":
        for it in sorted(data["items"], key=lambda i: i["id"]):
            if it["done"] and args.all:
                print(f"{it['id']}. [x] {it['text']}")
            elif not it["done"]:
                print(f"{it['id']}. {it['text']}")
    else:
        match = [it for it in data["items"] if it["id"] == args.id]
        if not match:
            print(f"error: no item {args.id}", file=sys.stderr)
            return 1
        if args.command == "done":
            match[0]["done"] = True
            print(f"done {args.id}")
        else:
            data["items"].remove(match[0])
            print(f"removed {args.id}")
        save(args.db, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
EOF
