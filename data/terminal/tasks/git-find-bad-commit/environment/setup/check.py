"""Exits 0 if pricing behaves, 1 if not."""
import sys

import pricing

ok = pricing.subtotal([1, 2, 3]) == 6
if hasattr(pricing, "discounted"):
    ok = ok and abs(pricing.discounted(200, 10) - 180) < 1e-9
if hasattr(pricing, "total"):
    ok = ok and pricing.total([50, 50], 50) == 60.0
sys.exit(0 if ok else 1)
