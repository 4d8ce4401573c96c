#!/bin/bash
cd /app
python3 - <<'EOF'
import csv
from decimal import Decimal
totals, counts = {}, {}
with open("sales.csv", newline="") as f:
    for row in csv.DictReader(f):
        r = row["region"]
        totals[r] = totals.get(r, Decimal(0)) + int(row["units"]) * Decimal(row["unit_price"])
        counts[r] = counts.get(r, 0) + 1
with open("revenue.csv", "w") as out:
    out.write("region,revenue,orders\n")
    for r in sorted(totals, key=lambda r: (-totals[r], r)):
        out.write(f"{r},{totals[r]:.2f},{counts[r]}\n")
EOF
