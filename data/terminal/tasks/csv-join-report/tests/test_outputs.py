import csv
import io
from decimal import Decimal
from pathlib import Path

DATA = Path(__file__).parent / "data"


def expected():
    with open(DATA / "customers.csv", newline="") as f:
        customers = list(csv.DictReader(f))
    totals = {c["id"]: [0, Decimal("0")] for c in customers}
    with open(DATA / "orders.csv", newline="") as f:
        for o in csv.DictReader(f):
            if o["status"] == "paid":
                totals[o["customer_id"]][0] += 1
                totals[o["customer_id"]][1] += Decimal(o["amount"])
    rows = sorted(customers, key=lambda c: (-totals[c["id"]][1], c["name"]))
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["name", "country", "paid_orders", "paid_total"])
    for c in rows:
        n, total = totals[c["id"]]
        w.writerow([c["name"], c["country"], n, f"{total:.2f}"])
    return buf.getvalue()


def test_report():
    out = Path("/app/report.csv")
    assert out.is_file(), "/app/report.csv was not written"
    assert out.read_bytes().decode() == expected()
