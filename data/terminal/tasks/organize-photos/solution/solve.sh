#!/bin/bash
cd /app
python3 - <<'EOF'
import datetime, re
from pathlib import Path
for p in sorted(Path("inbox").iterdir()):
    m = re.fullmatch(r"IMG_(\d{4})(\d{2})(\d{2})_\d{6}\.jpg", p.name)
    if not m:
        continue
    try:
        datetime.date(*map(int, m.groups()))
    except ValueError:
        continue
    dest = Path("photos") / m.group(1) / m.group(2)
    dest.mkdir(parents=True, exist_ok=True)
    p.rename(dest / p.name)
EOF
