"""Terminal coding tasks in the Harbor / Terminal-Bench 2 folder format.

Hand-written tasks live as real folders in the data folder (`data/terminal/tasks/` of the
checkout); generated bug-fix tasks (mutations of permissively licensed pure-Python libraries,
fetched from PyPI into the cache at set-up) are materialised from them and `mutations.jsonl`.
See data/terminal/README.md.

    from tempering.tasks import terminal
    for t in terminal.tasks():            # TaskInfo: name, kind, difficulty, tags, needs, origin
        ...
    path = terminal.materialize("fix-median-even", "/tmp/tasks")   # /tmp/tasks/fix-median-even
"""

from tempering.tasks.terminal.catalog import (GENERATED, HAND_WRITTEN, TaskInfo, folder, get, libraries,
                                              materialize, names, tasks)

__all__ = ["GENERATED", "HAND_WRITTEN", "TaskInfo", "folder", "get", "libraries", "materialize", "names", "tasks"]
