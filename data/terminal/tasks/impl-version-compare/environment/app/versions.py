"""Comparing semantic versions."""


def compare(a, b):
    raise NotImplementedError


def sort_versions(items):
    raise NotImplementedError
