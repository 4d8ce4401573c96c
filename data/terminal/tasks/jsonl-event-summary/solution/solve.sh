#!/bin/bash
cd /app
python3 - <<'EOF'
import json
events, invalid = [], 0
for line in open("events.jsonl"):
    if not line.strip():
        continue
    try:
        ev = json.loads(line)
    except ValueError:
        invalid += 1
        continue
    if isinstance(ev, dict):
        events.append(ev)
    else:
        invalid += 1
by_type = {}
for e in events:
    by_type[e["type"]] = by_type.get(e["type"], 0) + 1
summary = {
    "events": len(events), "invalid": invalid, "by_type": by_type,
    "users": len({e["user"] for e in events}),
    "errors": sum(e.get("level") == "error" for e in events),
    "purchase_total": sum(e["amount"] for e in events if e["type"] == "purchase"),
    "first": min(e["ts"] for e in events), "last": max(e["ts"] for e in events),
}
with open("summary.json", "w") as f:
    json.dump(summary, f, indent=2)
EOF
