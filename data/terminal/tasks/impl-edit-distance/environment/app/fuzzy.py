"""Edit distance and fuzzy matching."""


def distance(a, b):
    raise NotImplementedError


def closest(word, candidates, max_distance=None):
    raise NotImplementedError
