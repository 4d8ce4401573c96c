"""Integer arithmetic expressions."""


def evaluate(expression):
    raise NotImplementedError
