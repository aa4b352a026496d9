"""Start a forward pass in the middle of a model's stack of blocks (its transformer layers).

Calibration passes often need only what happens from block b on: the planner's sensitivity runs
(one layer quantized, everything before its block float) and sequential quantization (blocks before
b already quantized, their outputs fixed). ``BlockCache`` keeps, per calibration batch, the outputs
of the blocks of the model's largest ``nn.ModuleList`` of blocks holding the layers of interest;
``skip(batch, b)`` makes blocks 0..b-1 return those outputs instead of computing anything. The model's
own forward still runs (embeddings, masks, caches are its business), so this works for any model
whose blocks are called once per forward; ``replays`` checks on a batch that replaying reproduces
the model's output before a caller relies on it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn as nn

__all__ = ["BlockCache", "StopForward", "stop_forward", "same_outputs"]

log = logging.getLogger("pyquant")


class StopForward(Exception):
    """Ends a calibration pass early, raised by a hook once what the pass is for has run."""


def stop_forward(module: nn.Module, *args: Any) -> None:
    """A forward (pre-)hook that ends the pass (``StopForward``)."""
    raise StopForward


def _tensors(out: Any) -> list[torch.Tensor]:
    """The tensors of a model output (tensor, tuple / list, dict or HF ModelOutput), in order."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):  # HF ModelOutput is an OrderedDict
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return []


def same_outputs(a: Any, b: Any, rtol: float = 1e-5, atol: float = 1e-6) -> bool:
    ta, tb = _tensors(a), _tensors(b)
    return (
        bool(ta)
        and len(ta) == len(tb)
        and all(
            x.shape == y.shape and torch.allclose(x, y, rtol=rtol, atol=atol)
            for x, y in zip(ta, tb, strict=True)
        )
    )


class BlockCache:
    """Per calibration batch, recorded outputs of the blocks of the model's largest stack of blocks
    (an nn.ModuleList holding the most of ``layers``). ``record(batch)`` keeps every block's output of
    one forward; ``record_block(batch, j, run)`` runs one pass up to block j's output (blocks before j
    replayed) and keeps it as block j's; ``skip(batch, b)`` replays blocks 0..b-1. ``blocks`` is
    empty (nothing replayed) where the model has no such stack or its blocks are not each called
    exactly once per forward. ``chained``: in the recorded forward each block read the previous
    block's output (as transformer stacks do); then ``record_block`` keeps only the latest output,
    which stands in for every block before it too (their outputs are never read again)."""

    def __init__(self, model: nn.Module, layers: Sequence[str]) -> None:
        self.blocks: list[nn.Module] = []
        self.block_of: dict[str, int] = {}
        self.outputs: dict[int, list[Any]] = {}
        self.chained = False
        best: tuple[int, str, nn.ModuleList] | None = None
        for name, mod in model.named_modules():
            if isinstance(mod, nn.ModuleList) and len(mod) >= 2:
                inside = sum(1 for n in layers if n.startswith(name + "."))
                if inside and (best is None or inside > best[0]):
                    best = (inside, name, mod)
        if best is None:
            return
        _, prefix, ml = best
        self.blocks = list(ml)
        for n in layers:
            if n.startswith(prefix + "."):
                self.block_of[n] = int(n[len(prefix) + 1 :].split(".")[0])

    @contextmanager
    def record(self, batch: int) -> Iterator[None]:
        if not self.blocks:
            yield
            return
        got: list[Any] = [None] * len(self.blocks)
        inputs: list[Any] = [None] * len(self.blocks)
        calls = [0] * len(self.blocks)

        def hook_for(j: int):  # noqa: ANN202
            def hook(mod: nn.Module, args: Any, out: Any) -> None:
                got[j] = out
                inputs[j] = args[0] if args else None
                calls[j] += 1

            return hook

        handles = [b.register_forward_hook(hook_for(j)) for j, b in enumerate(self.blocks)]
        try:
            yield
        finally:
            for h in handles:
                h.remove()
        if any(c != 1 for c in calls):
            log.info("pyquant: blocks are not called once per forward; no block output reuse")
            self.blocks = []
        self.outputs[batch] = got

        def first(o: Any) -> Any:
            return o[0] if isinstance(o, (tuple, list)) and o else o

        self.chained = all(
            inputs[j] is not None and inputs[j] is first(got[j - 1]) for j in range(1, len(got))
        )

    def record_block(self, batch: int, j: int, run: Callable[[], Any]) -> None:
        """Run ``run()`` (one forward of ``batch``) with blocks 0..j-1 replayed, stopping once block j
        has returned, and keep that output as block j's (chained stacks: for blocks 0..j)."""
        got: list[Any] = []

        def hook(mod: nn.Module, args: Any, out: Any) -> None:
            got.append(out)
            stop_forward(mod)

        handle = self.blocks[j].register_forward_hook(hook)
        try:
            with self.skip(batch, j):
                run()
        except StopForward:
            pass
        finally:
            handle.remove()
        if not got:
            raise RuntimeError(f"block {j} was not called by the forward pass")
        before = self.outputs.get(batch, [])[:j]
        self.outputs[batch] = [got[0]] * (j + 1) if self.chained else [*before, got[0]]

    def replays(self, batch: int, run: Callable[[], Any], reference: Any) -> bool:
        """Whether replaying every block of ``batch`` reproduces ``reference`` (the output of ``run()``
        when the outputs were recorded); if not, logs and disables replay."""
        if not self.blocks:
            return False
        with self.skip(batch, len(self.blocks)):
            again = run()
        if not same_outputs(again, reference):
            log.info("pyquant: replaying recorded block outputs does not reproduce the model; not reusing")
            self.blocks = []
        return bool(self.blocks)

    @contextmanager
    def skip(self, batch: int, upto: int) -> Iterator[None]:
        if not self.blocks or upto <= 0:
            yield
            return
        saved = []
        for j in range(upto):
            blk, out = self.blocks[j], self.outputs[batch][j]
            saved.append((blk, blk.__dict__.get("forward")))
            blk.forward = lambda *a, _o=out, **k: _o  # instance attribute shadows the class method
        try:
            yield
        finally:
            for blk, old in saved:
                if old is None:
                    del blk.forward
                else:
                    blk.forward = old

    def block(self, layer: str) -> int:
        return self.block_of.get(layer, 0) if self.blocks else 0
