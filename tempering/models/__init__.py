"""Plain decoder models shared by engine and trainer, a sequence-scoring variant (reward
models), and HF checkpoint loading and saving."""

from tempering.models.arch import Arch
from tempering.models.decoder import Decoder
from tempering.models.checkpoint import build_model, load_hf, save_hf
from tempering.models.classifier import (SequenceClassifier, build_classifier, last_token_index, load_classifier,
                                         save_classifier)

__all__ = ["Arch", "Decoder", "build_model", "load_hf", "save_hf", "SequenceClassifier", "build_classifier",
           "last_token_index", "load_classifier", "save_classifier"]
