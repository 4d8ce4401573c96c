import csv
import io
from pathlib import Path


def expected():
    lines = (Path(__file__).parent / "data" / "stations.txt").read_text(encoding="utf-8").splitlines()
    body = lines[3:lines.index("-" * 40)]
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["id", "city", "temp_c", "rain_mm", "status"])
    for ln in body:
        row = [ln[0:8], ln[8:22], ln[22:29], ln[29:35], ln[37:]]
        row = [x.strip() for x in row]
        if row[4] != "offline":
            w.writerow(row)
    return buf.getvalue()


def test_csv():
    out = Path("/app/stations.csv")
    assert out.is_file(), "/app/stations.csv was not written"
    assert out.read_bytes().decode("utf-8") == expected()
