"""Task domains: each owns how its tasks are made (a generator or a dataset), the tools its
episodes may call and how an answer is checked (`domain.Domain`); the registry finds them by
name, in the package and in plugins (`registry`). One module or folder per family."""

from tempering.tasks.domain import Domain
from tempering.tasks.registry import domains, get_domain, load_plugins, register, resolve_scorers, resolve_weights

__all__ = ["Domain", "domains", "get_domain", "load_plugins", "register", "resolve_scorers", "resolve_weights"]
