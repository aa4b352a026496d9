"""PyTorch reference implementations of the pyquant ONNX ops (docs/ops.md), as torch.library ops.

``pyquant::matmul_int4`` and ``pyquant::linear_fp8`` take exactly the inputs and attributes of
``pyquant::MatMulInt4`` / ``pyquant::LinearFp8`` in the same packed layouts, so

* a quantized model runs in eager PyTorch with the numerics of the ORT kernels (dequantize in
  float32, matmul in float32, bias in float32, one final rounding to the activation dtype; FP8
  activation quantization bit-exact; MatMulInt4's ``accuracy_level`` 4 quantizes X to int8 per row
  and block bit-exactly as docs/ops.md specifies for the CPU EP, with exact integer block dots), and
* ``torch.export`` sees one opaque node per layer whose inputs are the packed buffers, which
  ``pyquant.export`` translates 1:1 into a ``pyquant`` domain ONNX node. Because the unpacking
  happens *inside* the op, there is nothing for the exporter to constant-fold into float weights.

``pyquant::kv_cache_write`` is ``pyquant::KVCacheWrite``'s reference (a static KV cache's write of
one step's keys / values at given slots; pyquant/export_lm.py).

The fake (meta) implementations only compute output shapes, for torch.export / torch.compile.
"""

from __future__ import annotations

import torch

from pyquant.layout import FP8_E4M3_MAX, INT4_SYMMETRIC_ZERO_POINT
from pyquant.ops_spec import INT4_ACCURACY_LEVELS, INT4_INT8_ACTIVATIONS

__all__ = [
    "dequantize_int4",
    "dequantize_fp8",
    "quantize_activations_fp8",
    "quantize_activations_int8",
    "matmul_int4",
    "linear_fp8",
    "kv_cache_write",
]

ACTIVATION_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
FP8_DTYPE = torch.float8_e4m3fn


def _unpack_nibbles(packed: torch.Tensor, n_rows: int, length: int) -> torch.Tensor:
    """uint8 [n_rows, ...] (two codes a byte, low nibble first) -> int32 codes [n_rows, length]."""
    flat = packed.reshape(n_rows, -1).to(torch.int32)
    codes = torch.stack((flat & 0xF, flat >> 4), dim=-1).reshape(n_rows, -1)
    return codes[:, :length]


def _centered_codes(
    b: torch.Tensor, zero_points: torch.Tensor | None, n: int, nb: int, block_size: int
) -> torch.Tensor:
    """Packed codes -> q - zp, int [N, n_blocks, block_size] (padding codes included)."""
    q = _unpack_nibbles(b, n, nb * block_size).reshape(n, nb, block_size)
    if zero_points is None:
        return q - INT4_SYMMETRIC_ZERO_POINT
    return q - _unpack_nibbles(zero_points, n, nb).reshape(n, nb, 1)


def dequantize_int4(
    b: torch.Tensor,
    scales: torch.Tensor,
    zero_points: torch.Tensor | None,
    k: int,
    n: int,
    block_size: int,
) -> torch.Tensor:
    """Packed MatMulInt4 weight -> float32 W [N, K]: (q - zp) * scale, formed in float32."""
    nb = -(-k // block_size)
    # (q - zp) is a small exact integer; the scale converts exactly from T to float32.
    w = _centered_codes(b, zero_points, n, nb, block_size).to(torch.float32) * scales.reshape(n, nb, 1).to(
        torch.float32
    )
    return w.reshape(n, nb * block_size)[:, :k]


def dequantize_fp8(w: torch.Tensor, w_scale: torch.Tensor, block_size: int) -> torch.Tensor:
    """FP8 weight [N, K] and float32 scales -> float32 W [N, K]."""
    n, k = w.shape
    wf = w.to(torch.float32)
    if block_size == 0:
        return wf * w_scale.reshape(n, 1).to(torch.float32)
    nb = -(-k // block_size)
    s = w_scale.reshape(n, nb).to(torch.float32).repeat_interleave(block_size, dim=1)[:, :k]
    return wf * s


def quantize_activations_fp8(
    x: torch.Tensor, x_scale: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] (any float dtype) -> (xq float8_e4m3fn [M, K], s_x float32 [M, 1]).

    Bit-exact with docs/ops.md: every step is one IEEE float32 operation in the documented order
    (inv = 448 / amax, not 1 / s_x, because the two round differently).
    """
    x32 = x.to(torch.float32)
    if x_scale is not None:
        s = x_scale.reshape(()).to(torch.float32)
        inv = torch.reciprocal(s)
        s_x = s.expand(x32.shape[0]).reshape(-1, 1)
        inv = inv.expand(x32.shape[0]).reshape(-1, 1)
    else:
        # NaN is ignored by the row max (it still propagates through x * inv below).
        absx = torch.where(torch.isnan(x32), torch.zeros_like(x32), x32.abs())
        amax = absx.amax(dim=1, keepdim=True) if x32.shape[1] > 0 else x32.new_zeros(x32.shape[0], 1)
        zero = amax == 0
        fmax = torch.tensor(FP8_E4M3_MAX, dtype=torch.float32, device=x.device)
        one = torch.ones((), dtype=torch.float32, device=x.device)
        safe = torch.where(zero, one, amax)
        inv = torch.where(zero, one, fmax / safe)  # amax = inf -> inv = 0 -> the row becomes NaN
        s_x = torch.where(zero, one, amax / fmax)
    # clamp keeps NaN; the cast rounds to nearest even (saturation already done by the clamp).
    xq = torch.clamp(x32 * inv, -FP8_E4M3_MAX, FP8_E4M3_MAX).to(FP8_DTYPE)
    return xq, s_x


def quantize_activations_int8(x: torch.Tensor, k: int, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] (any float dtype) -> (xq float32 [M, n_blocks, block_size], s_x float32 [M, n_blocks]).

    MatMulInt4's int8 activations (accuracy_level 4, docs/ops.md "Int8 activations"), bit-exact with
    ``pyquant.reference.quantize_activations_int8_ref``: per row and K block, amax = max |x|,
    inv = 127 / amax, s_x = amax / 127, xq = round_half_even(x * inv), each one IEEE float32 operation
    (tensor / tensor: ``127.0 / t`` would multiply by a rounded reciprocal). amax == 0: s_x = 0, xq = 0;
    amax not finite: s_x = NaN, xq = 0. xq holds integers in -127..127 (as float32, exact), zero past K.
    An amax below 127 / FLT_MAX gives inv = Inf; the product is then clamped to [-127, 127], NaN -> 0.
    """
    m = x.shape[0]
    nb = -(-k // block_size)
    x32 = x.reshape(m, k).to(torch.float32)
    if nb * block_size != k:
        x32 = torch.nn.functional.pad(x32, (0, nb * block_size - k))
    xb = x32.reshape(m, nb, block_size)
    amax = xb.abs().amax(dim=2)  # NaN propagates
    finite = torch.isfinite(amax)
    usable = finite & (amax > 0)
    qmax = torch.tensor(127.0, dtype=torch.float32, device=x.device)
    one = torch.ones((), dtype=torch.float32, device=x.device)
    safe = torch.where(usable, amax, one)
    inv = qmax / safe
    zero = torch.zeros((), dtype=torch.float32, device=x.device)
    nan = torch.full((), float("nan"), dtype=torch.float32, device=x.device)
    s_x = torch.where(usable, safe / qmax, torch.where(finite, zero, nan))
    xq = torch.round(torch.nan_to_num(xb * inv.unsqueeze(2), nan=0.0)).clamp(-127.0, 127.0)  # half-even
    xq = torch.where(usable.unsqueeze(2), xq, zero)
    return xq, s_x


def _check_accuracy_level(accuracy_level: int) -> None:
    if accuracy_level not in INT4_ACCURACY_LEVELS:
        raise ValueError(
            f"pyquant::matmul_int4: accuracy_level must be one of {INT4_ACCURACY_LEVELS} "
            f"(0-3: float activations, {INT4_INT8_ACTIVATIONS}: int8 activations), got {accuracy_level!r}"
        )


# Upper bound on the float32 elements of one chunk of per-block dots [blocks, M, N] (64 MiB).
_INT8_DOT_CHUNK_ELEMS = 1 << 24


def _matmul_int4_int8(
    x: torch.Tensor,
    b: torch.Tensor,
    scales: torch.Tensor,
    zero_points: torch.Tensor | None,
    k: int,
    n: int,
    block_size: int,
) -> torch.Tensor:
    """accuracy_level 4 without bias: x [M, K] -> float32 [M, N] =
    sum_b float32(scales[n, b] * s_x[m, b]) * dot[m, n, b], summed in float32."""
    m = x.shape[0]
    nb = -(-k // block_size)
    xq, s_x = quantize_activations_int8(x, k, block_size)
    # (q - zp) in -15..15; codes past K meet xq = 0. Products and block sums are integers below 2^24,
    # so the float32 (or TF32: 10-bit mantissa) block dots are exact in any summation order.
    qz = _centered_codes(b, zero_points, n, nb, block_size).to(torch.float32).permute(1, 2, 0)  # [nb, bs, N]
    xqb = xq.permute(1, 0, 2)  # [nb, M, bs]
    s32 = scales.reshape(n, nb).to(torch.float32).t().unsqueeze(1)  # [nb, 1, N]
    sx = s_x.t().unsqueeze(2)  # [nb, M, 1]
    y = torch.zeros((m, n), dtype=torch.float32, device=x.device)
    step = max(1, min(nb, _INT8_DOT_CHUNK_ELEMS // max(1, m * n)))
    for i in range(0, nb, step):
        dots = torch.bmm(xqb[i : i + step], qz[i : i + step])  # [g, M, N], exact integers
        y = y + ((s32[i : i + step] * sx[i : i + step]) * dots).sum(dim=0)  # scale product rounded to float32
    return y


@torch.library.custom_op("pyquant::matmul_int4", mutates_args=())
def matmul_int4(
    x: torch.Tensor,
    b: torch.Tensor,
    scales: torch.Tensor,
    zero_points: torch.Tensor | None,
    bias: torch.Tensor | None,
    K: int,
    N: int,
    block_size: int,
    accuracy_level: int = 0,
) -> torch.Tensor:
    """Reference of ``pyquant::MatMulInt4``: Y = X @ W.T (+ bias), W block-wise 4-bit.

    accuracy_level 0-3: X in float32; 4: X quantized to int8 per row and block (the CPU EP's numerics).
    """
    _check_accuracy_level(accuracy_level)
    lead = x.shape[:-1]
    if accuracy_level == INT4_INT8_ACTIVATIONS:
        y = _matmul_int4_int8(x.reshape(-1, K), b, scales, zero_points, K, N, block_size)
    else:
        w = dequantize_int4(b, scales, zero_points, K, N, block_size)
        y = x.reshape(-1, K).to(torch.float32) @ w.t()
    if bias is not None:
        y = y + bias.to(torch.float32)
    return y.to(x.dtype).reshape(*lead, N)


@matmul_int4.register_fake
def _(x, b, scales, zero_points, bias, K, N, block_size, accuracy_level=0):
    _check_accuracy_level(accuracy_level)
    return x.new_empty((*x.shape[:-1], N))


@torch.library.custom_op("pyquant::linear_fp8", mutates_args=())
def linear_fp8(
    x: torch.Tensor,
    w: torch.Tensor,
    w_scale: torch.Tensor,
    x_scale: torch.Tensor | None,
    bias: torch.Tensor | None,
    block_size: int,
    weight_only: bool = False,
) -> torch.Tensor:
    """Reference of ``pyquant::LinearFp8``: per-token (or static) FP8 activations x FP8 weights;
    with ``weight_only`` (the op's ``weight_only=1``) X as float32, not quantized (x_scale None)."""
    n, k = w.shape
    lead = x.shape[:-1]
    wd = dequantize_fp8(w, w_scale, block_size)
    if weight_only:
        if x_scale is not None:
            raise ValueError("linear_fp8: weight_only takes no x_scale (X is not quantized)")
        y = x.reshape(-1, k).to(torch.float32) @ wd.t()
    else:
        xq, s_x = quantize_activations_fp8(x.reshape(-1, k), x_scale)
        y = (xq.to(torch.float32) @ wd.t()) * s_x
    if bias is not None:
        y = y + bias.to(torch.float32)
    return y.to(x.dtype).reshape(*lead, n)


@linear_fp8.register_fake
def _(x, w, w_scale, x_scale, bias, block_size, weight_only=False):
    return x.new_empty((*x.shape[:-1], w.shape[0]))


@torch.library.custom_op("pyquant::kv_cache_write", mutates_args=())
def kv_cache_write(past: torch.Tensor, new: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
    """Reference of ``pyquant::KVCacheWrite``: ``past`` [batch, heads, L, head_dim] with
    ``new`` [batch, heads, S, head_dim] written at slots ``cache_position`` [S] (int64, distinct, in
    [0, L)) along dim 2. Out of place here; the ORT op writes in place when its output buffer is
    its input's."""
    if past.dim() != 4 or new.dim() != 4 or cache_position.dim() != 1:
        raise ValueError(
            f"kv_cache_write: past / new must be 4-D and cache_position 1-D, got {tuple(past.shape)}, "
            f"{tuple(new.shape)}, {tuple(cache_position.shape)}"
        )
    return past.index_copy(2, cache_position, new.to(past.dtype))


@kv_cache_write.register_fake
def _(past, new, cache_position):
    return torch.empty_like(past)
