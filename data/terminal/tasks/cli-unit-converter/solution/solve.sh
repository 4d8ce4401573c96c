#!/bin/bash
cat > /app/convert.py <<'EOF'
"""Convert lengths between units."""

import argparse
import sys

MM = {"mm": 1.0, "cm": 10.0, "m": 1000.0, "km": 1e6, "in": 25.4}
MM["ft"] = 12 * MM["in"]
MM["yd"] = 3 * MM["ft"]
MM["mi"] = 1760 * MM["yd"]
ORDER = ["mm", "cm", "m", "km", "in", "ft", "yd", "mi"]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--list"]:
        print("\n".join(ORDER))
        return 0
    p = argparse.ArgumentParser(prog="convert")
    p.add_argument("value", type=float)
    p.add_argument("source")
    p.add_argument("target")
    p.add_argument("--precision", type=int, default=3)
    args = p.parse_args(argv)
    for unit in (args.source, args.target):
        if unit not in MM:
            print(f"error: unknown unit {unit}", file=sys.stderr)
            return 2
    result = args.value * MM[args.source] / MM[args.target]
    print(f"{result:.{args.precision}f} {args.target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
EOF
