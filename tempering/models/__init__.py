"""Plain decoder models shared by engine and trainer, and HF checkpoint loading and saving."""

from tempering.models.arch import Arch
from tempering.models.decoder import Decoder
from tempering.models.checkpoint import build_model, load_hf, save_hf

__all__ = ["Arch", "Decoder", "build_model", "load_hf", "save_hf"]
