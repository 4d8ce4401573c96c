"""Layered configuration."""


def deep_merge(base, override):
    for key, value in override.items():
        base[key] = value
    return base


def load(*layers):
    result = {}
    for layer in layers:
        result = deep_merge(result, layer)
    return result
