from collections import Counter
from pathlib import Path


def expected():
    counts = Counter()
    for line in (Path(__file__).parent / "data" / "access.log").read_text().splitlines():
        parts = line.split(" ")
        if int(parts[8]) < 400:
            counts[parts[0]] += 1
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0].encode()))[:5]
    return "".join(f"{n} {ip}\n" for ip, n in top)


def test_top_clients():
    out = Path("/app/top_clients.txt")
    assert out.is_file(), "/app/top_clients.txt was not written"
    assert out.read_text() == expected()
