"""INT4 weight quantizers beyond round-to-nearest, registered in ``pyquant.algorithms``.

* "mse": per block, the range (max |w| for symmetric, [min, max] for asymmetric) is shrunk by the
  factor of ``clip_grid`` candidates in [0.5, 1] that minimises the block's squared rounding error,
  weighted per input channel by E[x_k^2] ~ abs_mean_k^2 when activation statistics are given. Shrink 1
  is a candidate, so the weighted error is never above RTN's. No calibration needed.
* "gptq": GPTQ (Frantar et al. 2022): columns rounded one at a time, each rounding error spread over
  the not yet rounded columns through the inverse Hessian of the layer input, lazy batches of 128
  columns, relative damping ``gptq_damp``, optional act-order. Block scales: see ``_int4_gptq``.
* "awq": the weights arrive already multiplied by the activation-aware per-channel scales of the AWQ
  pre-pass (``pyquant.awq``, run by ``pyquant.quantize``; the inverse scales are folded into the
  preceding op); this quantizer is then the activation-weighted clipping search of "mse".
* "awq-gptq": the same pre-pass, then GPTQ.

All return exactly the MatMulInt4 layout (``pyquant.layout.pack_int4`` / ``pack_zero_points``).
"""

from __future__ import annotations

import math

import torch

from pyquant import layout
from pyquant.algorithms import CalibrationStats, Int4Packed, prepare_gptq, register_weight_quantizer
from pyquant.config import Int4Config

__all__ = ["block_params", "fake_quantize_int4", "search_block_params", "quantize_int4_codes"]

MIN_SHRINK = 0.5  # the clipping search never cuts a block's range by more than half
GPTQ_BATCH = 128  # lazy batch: columns whose error updates are applied to the rest of W at once


# --- block parameters ---------------------------------------------------------------------------------


def _ranges(wb: torch.Tensor, symmetric: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(lo, hi) of blocks [..., m]: symmetric (-amax, amax); asymmetric a range containing 0."""
    if symmetric:
        amax = wb.abs().amax(-1)
        return -amax, amax
    return wb.amin(-1).clamp(max=0.0), wb.amax(-1).clamp(min=0.0)


def _params(
    lo: torch.Tensor, hi: torch.Tensor, symmetric: bool, shrink: float
) -> tuple[torch.Tensor, torch.Tensor]:
    if symmetric:
        scale = hi * shrink / 7.0
        return scale, torch.full_like(scale, float(layout.INT4_SYMMETRIC_ZERO_POINT))
    lo, hi = lo * shrink, hi * shrink
    scale = (hi - lo) / 15.0
    safe = torch.where(scale == 0, torch.ones_like(scale), scale)
    return scale, torch.round(-lo / safe).clamp(0, 15)


def block_params(wb: torch.Tensor, symmetric: bool, shrink: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale and zero point of blocks ``wb [..., m]`` (-> [...] each, float32) with the range shrunk by
    ``shrink``. shrink 1 gives exactly ``layout.quantize_int4_rtn``'s parameters: symmetric amax / 7
    with zero point 8; asymmetric (max - min) / 15 over a range that contains 0."""
    return _params(*_ranges(wb, symmetric), symmetric, shrink)


def quantize_int4_codes(wb: torch.Tensor, scale: torch.Tensor, zp: torch.Tensor) -> torch.Tensor:
    """Codes 0..15 (float) of ``wb [..., m]`` with per-block ``scale``, ``zp`` [...]."""
    safe = torch.where(scale == 0, torch.ones_like(scale), scale)
    return (torch.round(wb / safe[..., None]) + zp[..., None]).clamp(0, 15)


def _dequant(q: torch.Tensor, scale: torch.Tensor, zp: torch.Tensor) -> torch.Tensor:
    return (q - zp[..., None]) * scale[..., None]


def _block_error(
    wb: torch.Tensor, scale: torch.Tensor, zp: torch.Tensor, symmetric: bool, imp: torch.Tensor | None
) -> torch.Tensor:
    """sum_j imp_j (w_j - w^_j)^2 per block. In place on one temporary: this is the inner loop of the
    clipping search (every weight, once per candidate), so it avoids the allocations of
    quantize_int4_codes + _dequant while computing the same values."""
    safe = torch.where(scale == 0, torch.ones_like(scale), scale)[..., None]
    t = wb / safe
    if symmetric:  # zero point 8: codes 0..15 are -8..7 around it
        t.round_().clamp_(-8.0, 7.0)
    else:
        z = zp[..., None]
        t.round_().add_(z).clamp_(0.0, 15.0).sub_(z)
    t.mul_(scale[..., None]).sub_(wb).square_()
    if imp is not None:
        t.mul_(imp)
    return t.sum(-1)


def search_block_params(
    wb: torch.Tensor, symmetric: bool, grid: int, importance: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per block of ``wb [..., m]``, the shrink factor in [MIN_SHRINK, 1] (``grid`` + 1 evenly spaced
    candidates, 1 included) minimising sum_j importance_j (w_j - w^_j)^2 -> (scale, zp) [...].
    ``importance`` broadcasts against wb (e.g. [m] or [nb, m]); zeros mask padding."""
    lo, hi = _ranges(wb, symmetric)
    best_scale, best_zp = _params(lo, hi, symmetric, 1.0)
    if grid <= 0:
        return best_scale, best_zp
    best = _block_error(wb, best_scale, best_zp, symmetric, importance)
    for i in range(1, grid + 1):
        scale, zp = _params(lo, hi, symmetric, 1.0 - (1.0 - MIN_SHRINK) * i / grid)
        err = _block_error(wb, scale, zp, symmetric, importance)
        better = err < best
        best = torch.where(better, err, best)
        best_scale = torch.where(better, scale, best_scale)
        best_zp = torch.where(better, zp, best_zp)
    return best_scale, best_zp


def _blocks(w: torch.Tensor, block_size: int) -> torch.Tensor:
    """W [N, K] -> zero-padded blocks [N, n_blocks, block_size]."""
    n, k = w.shape
    nb = math.ceil(k / block_size)
    padded = torch.zeros(n, nb * block_size, dtype=torch.float32, device=w.device)
    padded[:, :k] = w
    return padded.reshape(n, nb, block_size)


def _importance(k: int, block_size: int, per_channel: torch.Tensor | None) -> torch.Tensor:
    """[n_blocks, block_size] weights of the clipping search: per_channel [K] (or 1), 0 on padding."""
    nb = math.ceil(k / block_size)
    imp = torch.zeros(nb * block_size, dtype=torch.float32)
    imp[:k] = 1.0 if per_channel is None else per_channel.detach().float().cpu()
    return imp.reshape(nb, block_size)


def _pack(codes: torch.Tensor, scales: torch.Tensor, zp: torch.Tensor | None, k: int, bs: int) -> Int4Packed:
    """codes float [N, >= K] 0..15, scales [N, nb], zp [N, nb] (None: symmetric) -> Int4Packed."""
    q = codes[:, :k].to(torch.uint8).cpu().numpy()
    b = layout.pack_int4(q, bs)
    zpp = None if zp is None else torch.from_numpy(layout.pack_zero_points(zp.to(torch.uint8).cpu().numpy()))
    return Int4Packed(torch.from_numpy(b), scales.float().cpu().contiguous(), zpp)


def fake_quantize_int4(
    w: torch.Tensor, block_size: int, symmetric: bool, grid: int = 0, per_channel: torch.Tensor | None = None
) -> torch.Tensor:
    """Quantize-dequantize W [N, K] float32 (RTN with grid 0, else the clipping search)."""
    n, k = w.shape
    wb = _blocks(w.float(), block_size)
    imp = _importance(k, block_size, per_channel).to(w.device) if grid else None
    scale, zp = search_block_params(wb, symmetric, grid, imp)
    return _dequant(quantize_int4_codes(wb, scale, zp), scale, zp).reshape(n, -1)[:, :k]


def _int4_search(weight: torch.Tensor, config: Int4Config, per_channel: torch.Tensor | None) -> Int4Packed:
    w = weight.detach().float().cpu()
    n, k = w.shape
    bs = config.block_size
    wb = _blocks(w, bs)
    scale, zp = search_block_params(wb, config.symmetric, config.clip_grid, _importance(k, bs, per_channel))
    codes = quantize_int4_codes(wb, scale, zp).reshape(n, -1)
    return _pack(codes, scale, None if config.symmetric else zp, k, bs)


def _channel_importance(stats: CalibrationStats | None) -> torch.Tensor | None:
    """E[x_k^2] per input channel if known (Hessian diagonal / tokens), else abs_mean^2, else None."""
    if stats is None:
        return None
    if stats.hessian is not None and stats.n_tokens:
        return torch.diag(stats.hessian).float() / stats.n_tokens
    if stats.abs_mean is not None:
        return stats.abs_mean.float() ** 2
    return None


@register_weight_quantizer("int4", "mse")
def _int4_mse(weight: torch.Tensor, config: Int4Config, stats: CalibrationStats | None) -> Int4Packed:
    return _int4_search(weight, config, _channel_importance(stats))


@register_weight_quantizer("int4", "awq", needs={"abs_mean"})
def _int4_awq(weight: torch.Tensor, config: Int4Config, stats: CalibrationStats | None) -> Int4Packed:
    if stats is None or stats.abs_mean is None:
        raise ValueError("int4 'awq' needs calibration statistics (abs_mean): pass calibration_data")
    return _int4_search(weight, config, _channel_importance(stats))


# --- GPTQ -----------------------------------------------------------------------------------------------


@register_weight_quantizer("int4", "gptq", needs={"hessian"})
def _int4_gptq(weight: torch.Tensor, config: Int4Config, stats: CalibrationStats | None) -> Int4Packed:
    """GPTQ onto the MatMulInt4 grid.

    Scales vs act-order: the op fixes one scale (and zero point) per contiguous K block, while
    act-order visits columns by decreasing Hessian diagonal, i.e. jumping between blocks. Each block's
    parameters are computed when the first of its columns is reached in processing order, from the
    block's weights as they are at that moment: already updated by the errors of every column rounded
    before (pending lazy-batch updates included), and none of its own columns rounded yet. So the
    scale covers the weights that will actually be rounded (the original ones have been moved by the
    error feedback), and without act-order this is exactly the usual group-wise GPTQ. The range is
    chosen by the clipping search (``clip_grid``), weighted by the Hessian diagonal.
    """
    k = weight.shape[1]
    bs = config.block_size
    perm = None
    if config.act_order:
        if stats is None or stats.hessian is None:
            raise ValueError("int4 'gptq' needs calibration statistics (hessian): pass calibration_data")
        perm = torch.argsort(torch.diag(stats.hessian).float().cpu(), descending=True, stable=True)
    w, hinv = prepare_gptq(weight, stats, config.gptq_damp, perm)
    n = w.shape[0]
    order = perm if perm is not None else torch.arange(k)  # processing position -> K index
    block_of = order // bs  # processing position -> block
    nb = math.ceil(k / bs)
    pos_of_block = [torch.nonzero(block_of == b).flatten() for b in range(nb)]
    hdiag = torch.diag(stats.hessian).float().cpu()[order]
    scale = torch.zeros(n, nb)
    zp = torch.zeros(n, nb)
    have = torch.zeros(nb, dtype=torch.bool)
    q = torch.zeros(n, k)
    for i1 in range(0, k, GPTQ_BATCH):
        i2 = min(i1 + GPTQ_BATCH, k)
        w1 = w[:, i1:i2].clone()
        err1 = torch.zeros_like(w1)
        hb = hinv[i1:i2, i1:i2]
        for i in range(i2 - i1):
            b = int(block_of[i1 + i])
            if not have[b]:
                pos = pos_of_block[b]  # all >= i1 + i: none of the block is rounded yet
                inb = pos < i2
                cur = torch.empty(n, len(pos))
                cur[:, inb] = w1[:, pos[inb] - i1]
                out = pos[~inb]
                if len(out):  # columns past this lazy batch: add the batch's pending updates
                    cur[:, ~inb] = w[:, out] - err1[:, :i] @ hinv[i1 : i1 + i, out]
                s, z = search_block_params(cur[:, None, :], config.symmetric, config.clip_grid, hdiag[pos])
                scale[:, b], zp[:, b] = s[:, 0], z[:, 0]
                have[b] = True
            col = w1[:, i]
            s, z = scale[:, b], zp[:, b]
            qc = quantize_int4_codes(col[:, None], s, z)[:, 0]
            q[:, i1 + i] = qc
            e = (col - (qc - z) * s) / hb[i, i]
            w1[:, i:] -= e[:, None] * hb[i, i:][None, :]
            err1[:, i] = e
        w[:, i2:] -= err1 @ hinv[i1:i2, i2:]
    codes = torch.empty_like(q)
    codes[:, order] = q  # back to natural K order
    return _pack(codes, scale, None if config.symmetric else zp, k, bs)


@register_weight_quantizer("int4", "awq-gptq", needs={"hessian"})
def _int4_awq_gptq(weight: torch.Tensor, config: Int4Config, stats: CalibrationStats | None) -> Int4Packed:
    return _int4_gptq(weight, config, stats)
