"""Word statistics."""

import re

_counts = {}
_total = 0


def add(text):
    """Count the words of text (lower-cased runs of letters and apostrophes)."""
    global _total
    for word in re.findall(r"[a-z']+", text.lower()):
        _counts[word] = _counts.get(word, 0) + 1
        _total += 1


def top(n):
    """The n most common words as (word, count), most common first, ties alphabetical."""
    return sorted(_counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


def total():
    return _total


def reset():
    global _total
    _counts.clear()
    _total = 0
