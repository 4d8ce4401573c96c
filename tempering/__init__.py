"""Tempering: reinforcement-learning post-training of language models.

The package is laid out as the data flow: tasks -> pool -> scheduler -> rollout (engine, agent
tools, sandbox) -> reward -> buffer -> trainer -> weights, with config, records and metrics
shared by all. docs/dataflow.md walks through it file by file."""

__version__ = "0.1.0"
