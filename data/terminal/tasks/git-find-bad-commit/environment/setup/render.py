import sys

step = int(sys.argv[1])
bad = step >= 11
lines = ['"""Order pricing."""', ""]
if step >= 3:
    lines += ["TAX_RATE = 0.2", ""]
if step >= 6:
    lines += ["", "def _cents(x):", "    return round(x * 100)", ""]
lines += ["", "def subtotal(prices):", '    """Sum of the item prices."""', "    return sum(prices)", ""]
if step >= 3:
    lines += ["", "def with_tax(amount):", "    return amount * (1 + TAX_RATE)", ""]
discount = "amount * (1 - percent / 100)" if not bad else "amount * (1 - percent / 1000)"
if step >= 4:
    lines += ["", "def discounted(amount, percent):", '    """amount reduced by percent %."""',
              "    if not 0 <= percent <= 100:", '        raise ValueError("percent out of range")',
              f"    return {discount}", ""]
if step >= 8:
    lines += ["", "def total(prices, percent=0):", "    return round(with_tax(discounted(subtotal(prices), percent)), 2)", ""]
for k in range(step):
    lines += [f"# revision {k + 1}"]
print("\n".join(lines))
