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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn as nn

__all__ = [
    "BlockCache",
    "Fingerprint",
    "StopForward",
    "stop_forward",
    "same_outputs",
    "block_stages",
    "record_up_to",
]

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


class Fingerprint:
    """A model output reduced to evenly strided samples of each of its tensors (at most ``SAMPLES``
    each), for ``BlockCache.replays``: holding the full output beside the replayed one doubled the
    check's memory (a language model's logits: SmolLM2's 2 x 512 tokens x 49,152 vocabulary are
    ~200 MB). A replay that goes wrong changes the hidden states of whole positions, and the stride
    (numel / SAMPLES) samples every position of such outputs several times."""

    SAMPLES = 1 << 16

    def __init__(self, out: Any) -> None:
        self.parts: list[tuple[tuple[int, ...], torch.Tensor]] = []
        for t in _tensors(out):
            flat = t.detach().reshape(-1)
            step = max(1, flat.numel() // self.SAMPLES)
            self.parts.append((tuple(t.shape), flat[::step].clone()))

    def matches(self, out: Any, rtol: float = 1e-5, atol: float = 1e-6) -> bool:
        other = Fingerprint(out).parts
        return (
            bool(self.parts)
            and len(other) == len(self.parts)
            and all(
                sa == sb and torch.allclose(a, b, rtol=rtol, atol=atol)
                for (sa, a), (sb, b) in zip(self.parts, other, strict=True)
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
        with self.recording(batch, j):
            run()

    @contextmanager
    def recording(self, batch: int, j: int) -> Iterator[None]:
        """``record_block`` around a body that runs the forward of ``batch`` (hooks of its own may
        collect statistics on the way): the StopForward raised after block j ends the body here."""
        got: list[Any] = []

        def hook(mod: nn.Module, args: Any, out: Any) -> None:
            got.append(out)
            stop_forward(mod)

        handle = self.blocks[j].register_forward_hook(hook)
        try:
            with self.skip(batch, j):
                yield
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
        when the outputs were recorded, or its ``Fingerprint``); if not, logs and disables replay."""
        if not self.blocks:
            return False
        with self.skip(batch, len(self.blocks)):
            again = run()
        ok = (
            reference.matches(again) if isinstance(reference, Fingerprint) else same_outputs(again, reference)
        )
        del again
        if not ok:
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


def block_stages(
    model: nn.Module, units: Mapping[str, Sequence[str]], batches: Sequence[Any], run: Callable[[Any], Any]
) -> tuple[list[tuple[int, list[str]]], BlockCache | None]:
    """Calibrating block by block: -> ([(stage, the units inside it)] in stack order, a cache whose
    recorded outputs replay the blocks before each), or ([(0, every unit)], None) for one pass over the
    whole model: where there is no stack of blocks, a unit's layers (``units``: name -> its layer
    names) are spread over several blocks, everything is in one stage, or replaying does not reproduce
    the model's output on ``batches[0]`` (``run(batch)``: one forward). Stage j < len(cache.blocks) is
    block j (its pass stops after the block); units outside the stack (a language model's lm_head, a
    classifier) form a last stage, ``len(cache.blocks)``, whose pass replays every block and runs the
    rest of the model.

    Why: statistics such as x^T x ([K, K] per layer input) then live for one block at a time, and a
    pass that stops after its block while the blocks before it replay keeps the total cost about one
    pass (each stage's pass records its block's output for the next: ``recording``)."""
    cache = BlockCache(model, [n for names in units.values() for n in names])
    if not cache.blocks:
        return [(0, list(units))], None
    after = len(cache.blocks)
    where: dict[str, int] = {}
    for key, names in units.items():
        blocks = {cache.block_of.get(n) for n in names}
        if len(blocks) != 1:
            return [(0, list(units))], None
        b = blocks.pop()
        where[key] = after if b is None else b
    if len(set(where.values())) < 2:
        return [(0, list(units))], None
    with torch.no_grad():
        with cache.record(0):
            reference = Fingerprint(run(batches[0]))  # the full output is not kept
        if not cache.replays(0, lambda: run(batches[0]), reference):
            return [(0, list(units))], None
    stages: dict[int, list[str]] = {}
    for key in units:
        stages.setdefault(where[key], []).append(key)
    return sorted(stages.items()), cache


def record_up_to(
    cache: BlockCache, done: int, upto: int, batches: Sequence[Any], run: Callable[[Any], Any]
) -> None:
    """Records blocks done..upto-1 for every batch (the blocks between two stages)."""
    with torch.no_grad():
        for j in range(done, upto):
            for i, batch in enumerate(batches):
                cache.record_block(i, j, lambda batch=batch: run(batch))
