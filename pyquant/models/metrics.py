"""Model-quality metrics, computed from a forward function so that the same code scores a PyTorch
module and an ONNX Runtime session.

A *forward* takes numpy (input_ids int64 [B, L], attention_mask int64 [B, L]) and returns numpy
float32 logits [B, L, V] (causal LM) or hidden states [B, L, H] (encoder).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn as nn

__all__ = [
    "Forward",
    "torch_forward",
    "ort_forward",
    "perplexity",
    "embed_texts",
    "classification_accuracy",
    "mean_cosine",
    "latency_ms",
]

Forward = Callable[[np.ndarray, np.ndarray], np.ndarray]


def torch_forward(module: nn.Module) -> Forward:
    """Forward of a wrapper module taking (input_ids, attention_mask) and returning one tensor."""
    module.eval()

    def fwd(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            out = module(torch.from_numpy(ids), torch.from_numpy(mask))
        return out.float().numpy()

    return fwd


def ort_forward(session: Any) -> Forward:
    names = [i.name for i in session.get_inputs()]

    def fwd(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feeds = {"input_ids": ids, "attention_mask": mask}
        return session.run(None, {n: feeds[n] for n in names})[0].astype(np.float32, copy=False)

    return fwd


def _progress(it: Sequence[Any], desc: str, enabled: bool) -> Any:
    if not enabled:
        return it
    from tqdm.auto import tqdm

    return tqdm(it, desc=desc, unit="batch", leave=False)


def perplexity(
    forward: Forward, ids: np.ndarray, batch_size: int = 2, progress: bool = False, desc: str = "perplexity"
) -> float:
    """exp(mean next-token NLL) over all positions 1..L-1 of every sequence in ids [S, L]."""
    nll, count = 0.0, 0
    starts = list(range(0, ids.shape[0], batch_size))
    for s in _progress(starts, desc, progress):
        x = ids[s : s + batch_size]
        logits = torch.from_numpy(forward(x, np.ones_like(x)))[:, :-1].double()
        target = torch.from_numpy(x[:, 1:])
        lp = torch.log_softmax(logits, dim=-1).gather(-1, target.unsqueeze(-1)).squeeze(-1)
        nll -= float(lp.sum())
        count += target.numel()
    return float(np.exp(nll / count))


def embed_texts(
    forward: Forward,
    tokenizer: Any,
    texts: Sequence[str],
    max_len: int = 128,
    batch_size: int = 16,
    progress: bool = False,
    desc: str = "embedding",
) -> np.ndarray:
    """Mean-pooled (over real tokens), L2-normalized sentence embeddings [len(texts), H] (the
    sentence-transformers recipe of all-MiniLM-L6-v2). Texts are batched by length for speed; the
    result is in input order."""
    enc = tokenizer(list(texts), truncation=True, max_length=max_len)
    order = np.argsort([len(t) for t in enc["input_ids"]], kind="stable")
    out: list[np.ndarray | None] = [None] * len(texts)
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    pad = tokenizer.pad_token_id or 0
    for b in _progress(batches, desc, progress):
        length = max(max(len(enc["input_ids"][i]) for i in b), 2)
        ids = np.full((len(b), length), pad, dtype=np.int64)
        mask = np.zeros((len(b), length), dtype=np.int64)
        for r, i in enumerate(b):
            t = enc["input_ids"][i]
            ids[r, : len(t)] = t
            mask[r, : len(t)] = 1
        h = forward(ids, mask).astype(np.float64)
        m = mask[..., None].astype(np.float64)
        e = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        e /= np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
        for r, i in enumerate(b):
            out[i] = e[r]
    return np.stack(out).astype(np.float32)


def classification_accuracy(
    train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray
) -> float:
    """Accuracy of a logistic-regression probe (scikit-learn, fixed settings) trained on train_x."""
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(max_iter=2000, C=10.0)
    clf.fit(train_x, train_y)
    return float((clf.predict(test_x) == test_y).mean())


def mean_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(1).mean())


def latency_ms(forward: Forward, ids: np.ndarray, mask: np.ndarray, warmup: int = 2, runs: int = 10) -> float:
    """Median wall time of one forward call, in milliseconds."""
    for _ in range(warmup):
        forward(ids, mask)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        forward(ids, mask)
        times.append(time.perf_counter() - t)
    return float(np.median(times) * 1e3)
