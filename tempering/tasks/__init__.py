"""Task domains: procedural generators of checkable tasks, one file per domain family.

A domain makes `Task` records; how an answer is checked is named by `Task.verifier` and lives in
`tempering.reward`. `get_domain` is the registry's only door and fails with the known names.
"""

from tempering.tasks.registry import DOMAINS, Domain, get_domain

__all__ = ["DOMAINS", "Domain", "get_domain"]
