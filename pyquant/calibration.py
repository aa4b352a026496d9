"""Static FP8 activation-scale calibration: the bounded statistic the calibration pass keeps per
layer, and the three ways ``Fp8Config(activation="static", calibration=...)`` turns it into a clip
value c (x_scale = c / 448; |x| > c saturates to +-448 in the op, docs/ops.md):

  "amax"        c = max |x| over all calibration tokens (no clipping; the default).
  "percentile"  c = the p-th percentile of |x| (Fp8Config.percentile, e.g. 99.99): a few outliers
                no longer stretch the scale of every other value.
  "mse"         c = argmin over a geometric grid of shrink factors f of amax of the mean squared
                FP8 quantization error of the observed |x| (clipping error + rounding error).

Memory is bounded whatever the amount of calibration data: a fixed-size histogram of |x| (every
value counted; the percentile reads it) and a fixed-size uniform random sample of |x| (the MSE
search quantizes it for every candidate clip). Both use a seeded generator, so calibration is
reproducible.
"""

from __future__ import annotations

import math

import torch

from pyquant.layout import FP8_E4M3_MAX

__all__ = ["AbsDistribution", "clip_from_stats", "fp8_quant_mse", "MSE_SHRINK_GRID"]

# Shrink factors f (c = f * amax) tried by the "mse" search: 2^(-i/8), i = 0..80, i.e. from amax
# down to amax / 1024 in steps of ~9 %. Geometric, because the useful clip of a heavy-tailed
# activation can be 10-100x below its max, and FP8's relative precision is the same at any scale.
MSE_SHRINK_GRID: tuple[float, ...] = tuple(2.0 ** (-i / 8) for i in range(81))


class AbsDistribution:
    """Bounded summary of |x| over a stream of activation batches.

    hist: ``bins`` counts over [0, hi]; when a larger |x| arrives, hi doubles (as often as needed)
    and adjacent bins merge pairwise, so counts are never redistributed approximately and the bin
    width is always within 2x of amax / bins.
    sample: a uniform random sample (without replacement) of at most ``sample_size`` values,
    kept as the values with the smallest random keys seen so far (exact, order-independent).
    """

    def __init__(self, bins: int = 4096, sample_size: int = 1 << 15, seed: int = 0) -> None:
        if bins < 2 or bins & (bins - 1):
            raise ValueError(f"bins must be a power of two >= 2, got {bins}")
        self.bins = bins
        self.sample_size = sample_size
        self.hist = torch.zeros(bins, dtype=torch.float64)
        self.hi = 0.0  # upper edge of the histogram (0 until a non-zero value was seen)
        self.zeros = 0  # values counted before the histogram had a range (all exactly 0)
        self.amax = 0.0
        self.count = 0
        self._gen = torch.Generator().manual_seed(seed)
        self._sample = torch.empty(0)
        self._keys = torch.empty(0)

    @torch.no_grad()
    def add(self, x: torch.Tensor) -> None:
        a = x.detach().reshape(-1).float().abs().cpu()
        a = a[~torch.isnan(a)]  # NaN carries no magnitude (the op keeps NaN as NaN)
        if a.numel() == 0:
            return
        self.count += a.numel()
        m = float(a.max())
        if not math.isfinite(m):
            raise ValueError("calibration activations contain inf; a static FP8 scale cannot be calibrated")
        self.amax = max(self.amax, m)
        if m > 0.0:
            if self.hi == 0.0:
                self.hi = m
                self.hist[0] += self.zeros
                self.zeros = 0
            elif m > self.hi:
                k = math.ceil(math.log2(m / self.hi))
                while self.hi * 2.0**k < m:  # log2 rounding
                    k += 1
                f = 1 << min(k, int(math.log2(self.bins)))
                merged = (
                    self.hist.reshape(self.bins // f, f).sum(1) if f < self.bins else self.hist.sum(0, True)
                )
                self.hist = torch.zeros(self.bins, dtype=torch.float64)
                self.hist[: merged.numel()] = merged
                self.hi *= 2.0**k
            self.hist += torch.histc(a, bins=self.bins, min=0.0, max=self.hi).double()
        else:
            self.zeros += a.numel()
        self._add_sample(a)

    def _add_sample(self, a: torch.Tensor) -> None:
        keys = torch.rand(a.numel(), generator=self._gen)
        if a.numel() > self.sample_size:  # pre-select this batch's share before concatenating
            keys, idx = torch.topk(keys, self.sample_size, largest=False, sorted=False)
            a = a[idx]
        vals = torch.cat([self._sample, a])
        keys = torch.cat([self._keys, keys])
        if vals.numel() > self.sample_size:
            keys, idx = torch.topk(keys, self.sample_size, largest=False, sorted=False)
            vals = vals[idx]
        self._sample, self._keys = vals, keys

    @property
    def sample(self) -> torch.Tensor:
        return self._sample

    def percentile(self, p: float) -> float:
        """p-th percentile (0 < p <= 100) of |x|, interpolated linearly inside its histogram bin."""
        if not 0.0 < p <= 100.0:
            raise ValueError(f"percentile must be in (0, 100], got {p}")
        if p == 100.0 or self.hi == 0.0:
            return self.amax
        total = float(self.hist.sum())
        target = p / 100.0 * total
        cum = torch.cumsum(self.hist, 0)
        i = int(torch.searchsorted(cum, torch.tensor([target], dtype=torch.float64))[0])
        i = min(i, self.bins - 1)
        before = float(cum[i - 1]) if i > 0 else 0.0
        width = self.hi / self.bins
        inside = (target - before) / float(self.hist[i]) if float(self.hist[i]) > 0 else 1.0
        return min(self.amax, (i + min(max(inside, 0.0), 1.0)) * width)

    def mse_clip(self, grid: tuple[float, ...] = MSE_SHRINK_GRID) -> float:
        """Clip value f * amax (f from ``grid``) with the least FP8 quantization MSE of |x|.

        MSE(c) = [sum_{x <= c} round_err(x)^2 + sum_{x > c} (x - c)^2] / count. The rounding part
        comes from the sample (scaled up to the full count); the clipping part from the histogram,
        i.e. from every value seen: a sample of a few 10^4 values misses the rare largest ones, and
        estimating their clipping cost from it would clip far too hard."""
        if self.amax == 0.0 or self._sample.numel() == 0:
            return self.amax
        v = self._sample.float()
        total = float(self.hist.sum()) + self.zeros
        width = self.hi / self.bins
        mids = (torch.arange(self.bins, dtype=torch.float64) + 0.5) * width
        best, best_err = self.amax, math.inf
        for f in grid:
            c = f * self.amax
            below = v[v <= c]
            rnd = float(_fp8_sq_err(below, c).sum()) * (total / v.numel()) if below.numel() else 0.0
            over = mids > c
            clip = float((self.hist[over] * (mids[over] - c) ** 2).sum())
            err = (rnd + clip) / total
            if err < best_err:  # strict: ties keep the larger clip (fewer saturated values)
                best, best_err = c, err
        return best


def _fp8_sq_err(v: torch.Tensor, clip: float) -> torch.Tensor:
    s = torch.tensor(clip, dtype=torch.float32) / FP8_E4M3_MAX
    inv = 1.0 / s
    q = torch.clamp(v * inv, -FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn).float() * s
    return (q - v).double() ** 2


def fp8_quant_mse(values: torch.Tensor, clip: float) -> float:
    """Mean squared error of quantizing ``values`` with the static scale clip / 448, exactly as the
    op does it: xq = e4m3(clamp(x * (1 / s), -448, 448)), dequantized xq * s (float32 arithmetic)."""
    return float(_fp8_sq_err(values.float(), clip).mean())


def clip_from_stats(calibration: str, amax: float, dist: AbsDistribution | None, percentile: float) -> float:
    """The activation clip value c (x_scale = c / 448) for one layer's calibration statistics."""
    if calibration == "amax":
        return amax
    if dist is None:
        raise ValueError(f"calibration {calibration!r} needs the activation distribution statistic")
    if calibration == "percentile":
        return dist.percentile(percentile)
    if calibration == "mse":
        return dist.mse_clip()
    raise ValueError(f"unknown FP8 activation calibration {calibration!r}")
