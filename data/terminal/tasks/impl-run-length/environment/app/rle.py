"""Run-length encoding: "aaab" <-> "3a1b"."""


def encode(text):
    raise NotImplementedError


def decode(code):
    raise NotImplementedError
