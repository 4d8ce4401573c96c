#!/bin/bash
cd /app
python3 - <<'EOF'
from pathlib import Path
p = Path("lru.py")
s = p.read_text()
s = s.replace("""            return default
        return self._data[key]""", """            return default
        self._data.move_to_end(key)
        return self._data[key]""")
p.write_text(s)
EOF
