"""The inference engine for RL sampling, with vLLM's names: `LLM`, `SamplingParams`, `generate`."""

from tempering.engine.llm_engine import LLM
from tempering.engine.outputs import CompletionOutput, RequestOutput
from tempering.engine.sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput"]
