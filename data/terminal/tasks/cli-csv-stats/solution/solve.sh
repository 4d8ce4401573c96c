#!/bin/bash
cat > /app/csvstat.py <<'EOF'
"""Statistics of one CSV column."""

import argparse
import csv
import sys


def main(argv=None):
    p = argparse.ArgumentParser(prog="csvstat")
    p.add_argument("file")
    p.add_argument("--column", required=True)
    p.add_argument("--stat", choices=["count", "sum", "min", "max", "mean"], default="mean")
    p.add_argument("--delimiter", default=",")
    args = p.parse_args(argv)
    with open(args.file, newline="") as f:
        reader = csv.reader(f, delimiter=args.delimiter)
        header = next(reader, [])
        if args.column not in header:
            print(f"csvstat: unknown column {args.column!r}", file=sys.stderr)
            return 2
        col = header.index(args.column)
        values = []
        for row in reader:
            cell = row[col].strip() if col < len(row) else ""
            if not cell:
                continue
            try:
                values.append(float(cell))
            except ValueError:
                print(f"csvstat: line {reader.line_num}: not a number: {cell!r}", file=sys.stderr)
                return 3
    if args.stat == "count":
        print(len(values))
        return 0
    if not values:
        print("nan")
        return 0
    result = {"sum": sum(values), "min": min(values), "max": max(values),
              "mean": sum(values) / len(values)}[args.stat]
    print(repr(round(result, 4)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
EOF
