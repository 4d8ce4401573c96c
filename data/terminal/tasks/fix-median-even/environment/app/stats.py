"""Small descriptive statistics for lists of numbers."""


def mean(values):
    if not values:
        raise ValueError("mean of an empty list")
    return sum(values) / len(values)


def median(values):
    if not values:
        raise ValueError("median of an empty list")
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle]


def mode(values):
    """The most common value; ties go to the smallest."""
    if not values:
        raise ValueError("mode of an empty list")
    counts = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    best = max(counts.values())
    return min(v for v, c in counts.items() if c == best)


def variance(values):
    """Population variance."""
    m = mean(values)
    return sum((v - m) ** 2 for v in values) / len(values)
