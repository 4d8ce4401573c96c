#!/bin/bash
cd /app
python3 - <<'EOF'
import csv
lines = open("stations.txt", encoding="utf-8").read().splitlines()
body = lines[3:lines.index("-" * 40)]
with open("stations.csv", "w", newline="", encoding="utf-8") as f:
    w = csv.writer(f)
    w.writerow(["id", "city", "temp_c", "rain_mm", "status"])
    for ln in body:
        row = [x.strip() for x in (ln[0:8], ln[8:22], ln[22:29], ln[29:35], ln[37:])]
        if row[4] != "offline":
            w.writerow(row)
EOF
