#!/bin/bash
cat > /app/wordstats.py <<'EOF'
"""Word statistics."""

import re


class WordCounter:
    def __init__(self):
        self._counts = {}
        self._total = 0

    def add(self, text):
        """Count the words of text (lower-cased runs of letters and apostrophes)."""
        for word in re.findall(r"[a-z']+", text.lower()):
            self._counts[word] = self._counts.get(word, 0) + 1
            self._total += 1

    def top(self, n):
        """The n most common words as (word, count), most common first, ties alphabetical."""
        return sorted(self._counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]

    def total(self):
        return self._total

    def reset(self):
        self._counts.clear()
        self._total = 0


default = WordCounter()


def add(text):
    default.add(text)


def top(n):
    return default.top(n)


def total():
    return default.total()


def reset():
    default.reset()
EOF
