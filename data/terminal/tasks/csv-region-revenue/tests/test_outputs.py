import csv
from decimal import Decimal
from pathlib import Path


def expected():
    totals, counts = {}, {}
    with open(Path(__file__).parent / "data" / "sales.csv", newline="") as f:
        for row in csv.DictReader(f):
            r = row["region"]
            totals[r] = totals.get(r, Decimal(0)) + int(row["units"]) * Decimal(row["unit_price"])
            counts[r] = counts.get(r, 0) + 1
    order = sorted(totals, key=lambda r: (-totals[r], r))
    lines = ["region,revenue,orders"] + [f"{r},{totals[r]:.2f},{counts[r]}" for r in order]
    return "\n".join(lines) + "\n"


def test_revenue_file():
    out = Path("/app/revenue.csv")
    assert out.is_file(), "/app/revenue.csv was not written"
    assert out.read_text() == expected()


def test_input_untouched():
    assert Path("/app/sales.csv").read_bytes() == (Path(__file__).parent / "data" / "sales.csv").read_bytes()
