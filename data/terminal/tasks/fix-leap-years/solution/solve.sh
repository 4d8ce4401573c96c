#!/bin/bash
cd /app
python3 - <<'EOF'
from pathlib import Path
p = Path("calendar_utils.py")
s = p.read_text()
s = s.replace("return year % 4 == 0", "return (year % 4 == 0 and year % 100 != 0) or year % 400 == 0")
s = s.replace("range(1, month)) + day - 1", "range(1, month)) + day")
p.write_text(s)
EOF
