"""Ordering packages by their dependencies."""


class CycleError(Exception):
    def __init__(self, cycle):
        super().__init__(f"dependency cycle among: {', '.join(cycle)}")
        self.cycle = cycle


def build_order(deps):
    raise NotImplementedError
