"""Math and logic: every reasoning-gym generator as a domain `reasoning/<dataset>`.

reasoning-gym (pinned in pyproject.toml) offers procedural datasets, each with a scorer. Each
dataset is one generator domain (`domain.py`): a task is an entry rebuilt from its `ref` in any
process (`entries.py`), answered between `<answer>` tags, and scored by the dataset's scorer
through our wrapper (`scoring.py`), which contains crashes, refuses replies that would make a
scorer run code or loop, and drops credit that junk earns. `catalog.py` lists the datasets, the
two excluded and the fixed ones with the reasons; `audit.py` is the junk audit (oracle 1.0,
junk 0) that the tests and `bench/reasoning_audit.py` run. Free-form numeric answers are also
checked with math-verify.

Importing this package does not import reasoning-gym; building or scoring an entry does.
"""

from tempering.tasks.reasoning.domain import DOMAINS, FAMILY, extract, grade, make, verify

__all__ = ["DOMAINS", "FAMILY", "extract", "grade", "make", "verify"]
