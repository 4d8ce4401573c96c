import random

import pytest
import money


@pytest.mark.parametrize("cents, text", [
    (123456, "$1,234.56"), (5, "$0.05"), (0, "$0.00"), (-5, "-$0.05"), (-123456, "-$1,234.56"),
    (100, "$1.00"), (-100, "-$1.00"), (123456789012, "$1,234,567,890.12"), (-99, "-$0.99"),
])
def test_format(cents, text):
    assert money.format_cents(cents) == text


def test_round_trip():
    rng = random.Random(5)
    for _ in range(2000):
        c = rng.randint(-10**12, 10**12)
        assert money.parse_dollars(money.format_cents(c)) == c
