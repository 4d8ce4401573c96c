"""Tempering: reinforcement-learning post-training of language models.

The package is laid out as the data flow: tasks -> pool -> rollout (engine, sandbox) -> reward ->
buffer -> trainer -> weights, with config, records and metrics shared by all. See
docs/architecture.md.
"""

__version__ = "0.1.0"
