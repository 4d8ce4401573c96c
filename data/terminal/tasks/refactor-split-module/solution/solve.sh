#!/bin/bash
cd /app
mkdir -p textkit
cat > textkit/cases.py <<'EOF'
"""Changing the case style of identifiers."""

import re


def snake_case(text):
    """'HelloWorld foo-bar' -> 'hello_world_foo_bar'"""
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", text)
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower()


def camel_case(text):
    """'hello_world foo' -> 'helloWorldFoo'"""
    words = [w for w in re.split(r"[^A-Za-z0-9]+", text) if w]
    if not words:
        return ""
    return words[0].lower() + "".join(w[:1].upper() + w[1:].lower() for w in words[1:])
EOF
cat > textkit/clean.py <<'EOF'
"""Cleaning text."""

import unicodedata


def strip_accents(text):
    """'café' -> 'cafe'"""
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def collapse_spaces(text):
    """'  a   b ' -> 'a b'"""
    return " ".join(text.split())
EOF
cat > textkit/count.py <<'EOF'
"""Counting words and letters."""

import re
from collections import Counter


def word_count(text):
    return len(re.findall(r"\w+", text))


def char_histogram(text):
    """Counts of the letters of text, lower-cased, most common first (ties alphabetical)."""
    counts = Counter(c.lower() for c in text if c.isalpha())
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
EOF
cat > textkit/__init__.py <<'EOF'
"""Text helpers."""

from textkit.cases import camel_case, snake_case
from textkit.clean import collapse_spaces, strip_accents
from textkit.count import char_histogram, word_count

__all__ = ["camel_case", "char_histogram", "collapse_spaces", "snake_case", "strip_accents", "word_count"]
EOF
cat > textutils.py <<'EOF'
"""Compatibility module: the helpers now live in the textkit package."""

from textkit import camel_case, char_histogram, collapse_spaces, snake_case, strip_accents, word_count  # noqa: F401
EOF
