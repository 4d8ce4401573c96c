"""bench/learning.py takes a folder made elsewhere: a tokenizer that adds BOS (as many real ones
and TRL's do) is read as transformers reads it, and the held-out split can be given as a file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _bos_folder(folder: Path) -> None:
    """A small Qwen2 of the bench's kind whose tokenizer puts <bos> before every text."""
    pytest.importorskip("transformers")
    sys.path.insert(0, str(BENCH))
    import learning
    from tokenizers import Tokenizer, processors

    learning.build_tokenizer(folder)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    bos = tok.token_to_id("<bos>")
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", bos)])
    tok.save(str(folder / "tokenizer.json"))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "add_bos_token": True}))
    vocab = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
    learning.build_model(vocab, seed=0).save_pretrained(str(folder))


def test_a_folder_whose_tokenizer_adds_bos_passes_the_check(tmp_path):
    _bos_folder(tmp_path)
    import learning

    checked = learning.check_folder(tmp_path)
    assert checked["bos_added"] and checked["max_abs_logit_diff"] < 1e-4


def test_the_heldout_split_comes_from_a_file(tmp_path):
    problems = [f"{i % 100}+{(i // 100) * 17}" for i in range(500)]  # 500 distinct
    (tmp_path / "heldout.txt").write_text("\n".join(problems) + "\n")
    code = ("import peer_addition as t; h = t.heldout_pairs(); tr = t.train_pairs(); "
            "print(len(h), len(tr), len(set(h) | set(tr)), f'{h[0][0]}+{h[0][1]}', f'{h[-1][0]}+{h[-1][1]}')")
    path = os.pathsep.join([str(BENCH), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "PYTHONPATH": path, "PEER_ADDITION_HELDOUT": str(tmp_path / "heldout.txt")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["500", "9500", "10000", problems[0], problems[-1]]
    (tmp_path / "heldout.txt").write_text("\n".join(problems[:-1] + ["7 plus 45"]) + "\n")
    r = subprocess.run([sys.executable, str(BENCH / "learning.py"), "--heldout", str(tmp_path / "heldout.txt"),
                        "--model", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "heldout.txt:500: expected a problem like 7+45, got '7 plus 45'" in r.stderr
