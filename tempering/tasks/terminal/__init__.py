"""Terminal coding tasks in the Harbor / Terminal-Bench 2 folder format.

Hand-written tasks live as real folders in `tasks/`; generated bug-fix tasks (mutations of
permissively licensed pure-Python libraries) are materialised on demand from `libraries/` and
`mutations.jsonl`. See README.md in this folder.

    from tempering.tasks import terminal
    for t in terminal.tasks():            # TaskInfo: name, kind, difficulty, tags, needs, origin
        ...
    path = terminal.materialize("fix-median-even", "/tmp/tasks")   # /tmp/tasks/fix-median-even
"""

from tempering.tasks.terminal.catalog import (GENERATED, HAND_WRITTEN, TaskInfo, get, libraries,
                                              materialize, names, tasks)

__all__ = ["GENERATED", "HAND_WRITTEN", "TaskInfo", "get", "libraries", "materialize", "names", "tasks"]
