"""Weight-quantization algorithms: a registry of functions (weight, config, stats) -> packed tensors.

INT4: "rtn", "mse", "gptq", "awq", "awq-gptq" (``pyquant.int4_algorithms``); FP8: "rtn", "gptq".
Another algorithm plugs in with

    @register_weight_quantizer("int4", "gptq", needs={"hessian"})
    def gptq(weight, config, stats): ...   # returns Int4Packed in the op layout

and is selected per layer with ``Int4Config(algorithm="gptq")``. ``needs`` tells the pass which
calibration statistics to collect (see ``CalibrationStats``); calibration data must then be given
to ``pyquant.quantize``. The packed result is checked against the op layout by the pass, so an
algorithm cannot silently produce a tensor the ONNX op would reject.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import torch

from pyquant import layout
from pyquant.calibration import AbsDistribution
from pyquant.config import Fp8Config, Int4Config

__all__ = [
    "Int4Packed",
    "Fp8Packed",
    "CalibrationStats",
    "STAT_KINDS",
    "register_weight_quantizer",
    "get_weight_quantizer",
    "registered_algorithms",
    "prepare_gptq",
]

# What the calibration pass can collect per layer (on the layer's input activations):
#   "amax"     max |x| over all calibration tokens (static FP8 activation scale)
#   "abs_mean" mean |x| per input channel [K] (activation-aware methods such as AWQ)
#   "hessian"  sum x x^T over tokens [K, K] float32 (second-order methods such as GPTQ)
#   "abs_dist" bounded histogram + uniform sample of |x| (``pyquant.calibration.AbsDistribution``:
#              percentile / MSE calibration of static FP8 activation scales)
STAT_KINDS = frozenset({"amax", "abs_mean", "hessian", "abs_dist"})


@dataclass
class CalibrationStats:
    n_tokens: int = 0
    amax: float | None = None
    abs_mean: torch.Tensor | None = None
    hessian: torch.Tensor | None = None
    abs_dist: AbsDistribution | None = None


@dataclass
class Int4Packed:
    """Exactly the MatMulInt4 inputs: qweight uint8 [N, n_blocks, bs/2], scales float32 [N, n_blocks]
    (cast to the activation dtype by the module), zero_points uint8 [N, ceil(n_blocks/2)] or None."""

    qweight: torch.Tensor
    scales: torch.Tensor
    zero_points: torch.Tensor | None = None


@dataclass
class Fp8Packed:
    """Exactly the LinearFp8 weight inputs: weight float8_e4m3fn [N, K], w_scale float32 [N] or [N, nb]."""

    weight: torch.Tensor
    w_scale: torch.Tensor


WeightQuantizer = Callable[[torch.Tensor, "Int4Config | Fp8Config", "CalibrationStats | None"], object]


@dataclass
class _Entry:
    fn: WeightQuantizer
    needs: frozenset[str] = field(default_factory=frozenset)


_REGISTRY: dict[tuple[str, str], _Entry] = {}


def register_weight_quantizer(
    scheme: str, name: str, *, needs: Iterable[str] = ()
) -> Callable[[WeightQuantizer], WeightQuantizer]:
    """Decorator registering ``fn(weight float32 [N, K], config, stats) -> Int4Packed | Fp8Packed``."""
    if scheme not in ("int4", "fp8"):
        raise ValueError(f"scheme must be 'int4' or 'fp8', got {scheme!r}")
    needs = frozenset(needs)
    if needs - STAT_KINDS:
        raise ValueError(
            f"unknown calibration statistics {sorted(needs - STAT_KINDS)}; known: {sorted(STAT_KINDS)}"
        )

    def deco(fn: WeightQuantizer) -> WeightQuantizer:
        _REGISTRY[(scheme, name)] = _Entry(fn, needs)
        return fn

    return deco


def get_weight_quantizer(scheme: str, name: str) -> tuple[WeightQuantizer, frozenset[str]]:
    try:
        e = _REGISTRY[(scheme, name)]
    except KeyError:
        known = sorted(n for s, n in _REGISTRY if s == scheme)
        raise ValueError(f"no {scheme} weight quantizer named {name!r}; registered: {known}") from None
    return e.fn, e.needs


def registered_algorithms() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for s, n in _REGISTRY:
        out.setdefault(s, []).append(n)
    return out


def fp8_from_numpy(a: np.ndarray) -> torch.Tensor:
    """ml_dtypes float8_e4m3fn array -> torch.float8_e4m3fn tensor (same bits)."""
    return torch.from_numpy(np.ascontiguousarray(a).view(np.uint8)).view(torch.float8_e4m3fn)


# --- round to nearest: the numpy quantizers of pyquant.layout are the documented reference ------


@register_weight_quantizer("int4", "rtn")
def _int4_rtn(weight: torch.Tensor, config: Int4Config, stats: CalibrationStats | None) -> Int4Packed:
    b, scales, zp = layout.quantize_int4_rtn(
        weight.detach().float().cpu().numpy(), config.block_size, config.symmetric
    )
    return Int4Packed(
        torch.from_numpy(b), torch.from_numpy(scales), None if zp is None else torch.from_numpy(zp)
    )


@register_weight_quantizer("fp8", "rtn")
def _fp8_rtn(weight: torch.Tensor, config: Fp8Config, stats: CalibrationStats | None) -> Fp8Packed:
    w, s = layout.quantize_weight_fp8(weight.detach().float().cpu().numpy(), config.weight_block_size)
    return Fp8Packed(fp8_from_numpy(w), torch.from_numpy(np.ascontiguousarray(s)))


# --- GPTQ-style error-compensating rounding for FP8 weights ------------------------------------------


def _fp8_scales(weight: torch.Tensor, block_size: int) -> torch.Tensor:
    """Per-element float32 scale [N, K] of the RTN layout (amax / 448 per row or per row block)."""
    n, k = weight.shape
    bs = k if block_size == 0 else block_size
    nb = -(-k // bs)
    padded = torch.zeros(n, nb * bs, dtype=torch.float32)
    padded[:, :k] = weight
    amax = padded.reshape(n, nb, bs).abs().amax(dim=2)
    scale = torch.where(amax == 0, torch.ones_like(amax), amax / layout.FP8_E4M3_MAX)
    return scale if block_size else scale[:, 0]


def prepare_gptq(
    weight: torch.Tensor, stats: CalibrationStats | None, damp: float, perm: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Shared GPTQ set-up -> (W float32 [N, K] copy, upper Cholesky factor of H^-1 float32 [K, K]).

    H = sum x x^T of the layer input. Dead input channels (H_jj = 0: the input is always zero there)
    get H_jj = 1 and zero weights, so H stays invertible and those columns cost nothing. Damping adds
    ``damp * mean(diag H)`` to the diagonal (numerical stability with few calibration tokens). With
    ``perm`` (act-order) both W's columns and H are permuted first, so the factor is in processing
    order. The upper Cholesky factor U of H^-1 (H^-1 = U^T U) is what the column loop needs: row i of
    U, divided by U_ii, spreads column i's rounding error over the later columns."""
    if stats is None or stats.hessian is None:
        raise ValueError("'gptq' needs calibration statistics (hessian): pass calibration_data")
    w = weight.detach().float().cpu().clone()
    k = w.shape[1]
    h = stats.hessian.detach().double().cpu().clone()
    if h.shape != (k, k):
        raise ValueError(f"gptq: Hessian shape {tuple(h.shape)} does not match in_features {k}")
    dead = torch.diag(h) == 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    if perm is not None:
        w = w[:, perm]
        h = h[perm][:, perm]
    h += torch.eye(k, dtype=torch.float64) * (damp * float(torch.diag(h).mean()))
    hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    return w, hinv.float()


@register_weight_quantizer("fp8", "gptq", needs={"hessian"})
def _fp8_gptq(
    weight: torch.Tensor, config: Fp8Config, stats: CalibrationStats | None, damp: float = 0.01
) -> Fp8Packed:
    """GPTQ (Frantar et al. 2022) with the e4m3 grid: columns are rounded one at a time (scales fixed
    from the RTN amax) and each rounding error is spread over the not yet rounded columns through the
    inverse Hessian of the layer input (H = sum x x^T over calibration tokens), which minimises the
    layer's output error instead of the weight error. Same packed layout as "rtn"."""
    if stats is None or stats.hessian is None:
        raise ValueError("fp8 'gptq' needs calibration statistics (hessian): pass calibration_data")
    w, hinv = prepare_gptq(weight, stats, damp)
    n, k = w.shape
    bsz = config.weight_block_size
    scale = _fp8_scales(weight.detach().float().cpu(), bsz)  # from the original weights, as before
    s_el = scale[:, None].expand(n, k) if bsz == 0 else scale.repeat_interleave(bsz, dim=1)[:, :k]
    fmax = layout.FP8_E4M3_MAX
    q = torch.empty(n, k, dtype=torch.float8_e4m3fn)
    blk = 128
    for i1 in range(0, k, blk):
        i2 = min(i1 + blk, k)
        w1 = w[:, i1:i2].clone()
        err1 = torch.zeros_like(w1)
        hb = hinv[i1:i2, i1:i2]
        for i in range(i2 - i1):
            col = w1[:, i]
            s = s_el[:, i1 + i]
            qc = (col / s).clamp(-fmax, fmax).to(torch.float8_e4m3fn)
            q[:, i1 + i] = qc
            e = (col - qc.float() * s) / hb[i, i]
            w1[:, i:] -= e[:, None] * hb[i, i:][None, :]
            err1[:, i] = e
        w[:, i2:] -= err1 @ hinv[i1:i2, i2:]
    return Fp8Packed(q, scale.contiguous())


# INT4 algorithms beyond RTN ("mse", "gptq", "awq", "awq-gptq") live in their own module; importing it
# registers them (it imports this module's registry, hence the import at the end).
from pyquant import int4_algorithms  # noqa: E402, F401
