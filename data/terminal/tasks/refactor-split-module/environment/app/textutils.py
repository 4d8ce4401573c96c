"""Text helpers used across the project."""

import re
import unicodedata
from collections import Counter


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


def strip_accents(text):
    """'café' -> 'cafe'"""
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def collapse_spaces(text):
    """'  a   b ' -> 'a b'"""
    return " ".join(text.split())


def word_count(text):
    return len(re.findall(r"\w+", text))


def char_histogram(text):
    """Counts of the letters of text, lower-cased, most common first (ties alphabetical)."""
    counts = Counter(c.lower() for c in text if c.isalpha())
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
