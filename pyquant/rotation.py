"""Residual-stream rotation for Llama-family decoders (QuaRot / SpinQuant style, without learning).

Why: INT4 block scales follow each block's largest weight, so a few large weights in a block cost the
rest of the block its resolution. An orthogonal change of basis Q of the hidden space spreads them: the
rotated weights W diag(gamma) Q are closer to Gaussian inside each K block, and the model computes the
same function in float.

How the model changes (h: a hidden state, a row vector of width d; Q: d x d orthogonal):

    ids -> embed -> [ @ Q ] -> h' = h Q        the residual stream is carried rotated
    RMSNorm(h') = RMSNorm(h) Q                 RMS is invariant under Q once the norm's gain is 1,
                                               so each gain gamma is folded into the layers it feeds
    q/k/v, gate/up:  W  <- W diag(gamma) Q     input side (these are the layers whose K is rotated)
    o_proj, down:    W  <- Q^T W, b <- b Q     output side: they write into the rotated stream
    final norm:      RMSNorm([ h' @ Q^T ])     back to the model's own basis before the final norm

The two bracketed products are new run-time MatMuls, once per model (a d x d float matrix: 1.3 MB for
d = 576), not per layer; they keep a tied lm_head tied (the embedding matrix itself is not rotated),
where folding the final gain into lm_head would need an untied float copy of the vocabulary matrix.

Q: "hadamard" (default) is a randomised Hadamard-like matrix: D (O_f kron H_p), where H_p is the
normalised Sylvester Hadamard matrix of the largest power of two p dividing d, O_f a random orthogonal
matrix of the remaining factor f = d / p, and D random signs; "random" is a Haar-random orthogonal
matrix (QR of a Gaussian). Both are seeded, so a rotation is reproducible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

ROTATIONS = ("hadamard", "random")


class RotateOutput(nn.Module):
    """``inner(x) @ Q``: the embedding's output carried into the rotated residual stream."""

    def __init__(self, inner: nn.Module, q: torch.Tensor) -> None:
        super().__init__()
        self.inner = inner
        self.register_buffer("rotation", q.clone())

    @property
    def weight(self) -> torch.Tensor:  # transformers reads embed_tokens.weight (tying, dtype checks)
        return self.inner.weight

    def forward(self, *args: torch.Tensor, **kwargs: torch.Tensor) -> torch.Tensor:
        y = self.inner(*args, **kwargs)
        return torch.matmul(y, self.rotation.to(y.dtype))


class UnrotateInput(nn.Module):
    """``inner(x @ Q^T)``: the final norm reads the residual stream back in the model's own basis."""

    def __init__(self, inner: nn.Module, q: torch.Tensor) -> None:
        super().__init__()
        self.inner = inner
        self.register_buffer("rotation_t", q.T.contiguous().clone())

    @property
    def weight(self) -> torch.Tensor:
        return self.inner.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(torch.matmul(x, self.rotation_t.to(x.dtype)))


@dataclass
class RotationReport:
    kind: str
    seed: int
    hidden: int
    layers: int


def _sylvester(p: int) -> torch.Tensor:
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < p:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / math.sqrt(p)


def _haar(n: int, g: torch.Generator) -> torch.Tensor:
    a = torch.randn(n, n, generator=g, dtype=torch.float64)
    q, r = torch.linalg.qr(a)
    return (q * torch.sign(torch.diagonal(r))[None, :]).contiguous()  # Haar measure (sign-fixed QR)


def rotation_matrix(d: int, kind: str = "hadamard", seed: int = 0) -> torch.Tensor:
    """A seeded d x d orthogonal matrix (float64); see the module docstring for the kinds."""
    if kind not in ROTATIONS:
        raise ValueError(f"rotation must be one of {ROTATIONS}, got {kind!r}")
    if not isinstance(d, int) or d < 1:
        raise ValueError(f"rotation size must be a positive int, got {d!r}")
    g = torch.Generator().manual_seed(seed)
    if kind == "random":
        return _haar(d, g)
    p = d & -d  # largest power of two dividing d
    f = d // p
    core = torch.kron(_haar(f, g) if f > 1 else torch.ones(1, 1, dtype=torch.float64), _sylvester(p))
    signs = torch.randint(0, 2, (d,), generator=g, dtype=torch.float64) * 2 - 1
    return signs[:, None] * core


def _decoder_parts(model: nn.Module) -> tuple[nn.Module, list[nn.Module]]:
    """-> (the inner decoder with embed_tokens / layers / norm, its layers), or a clear error."""
    inner = getattr(model, "model", model)
    need = ("embed_tokens", "layers", "norm")
    if not all(hasattr(inner, a) for a in need):
        raise ValueError(
            f"{type(model).__name__}: residual rotation supports Llama-family decoders "
            "(model.embed_tokens, model.layers, model.norm); this model has no such structure"
        )
    if isinstance(inner.embed_tokens, RotateOutput):
        raise ValueError(f"{type(model).__name__} is already rotated")
    layers = list(inner.layers)
    for i, layer in enumerate(layers):
        for path in (
            "input_layernorm",
            "post_attention_layernorm",
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        ):
            mod = layer.get_submodule(path) if _has(layer, path) else None
            if mod is None:
                raise ValueError(f"layer {i}: no {path}; residual rotation supports Llama-family decoders")
            if path.endswith("proj") and not isinstance(mod, nn.Linear):
                raise ValueError(
                    f"layer {i}: {path} is a {type(mod).__name__}, not a float nn.Linear; rotate before "
                    "quantizing"
                )
        for norm_path in ("input_layernorm", "post_attention_layernorm"):
            _check_rms_norm(layer.get_submodule(norm_path), f"layer {i}.{norm_path}")
    _check_rms_norm(inner.norm, "final norm")
    return inner, layers


def _head_dim(inner: nn.Module, attn: nn.Module) -> int:
    hd = getattr(attn, "head_dim", None)
    if not isinstance(hd, int) or hd < 1 or attn.o_proj.in_features % hd or attn.v_proj.out_features % hd:
        raise ValueError(f"{type(attn).__name__}: cannot tell the attention head size (head_dim={hd!r})")
    return hd


@torch.no_grad()
def _rotate_heads(attn: nn.Module, h: torch.Tensor) -> None:
    """Every value head carried in the basis H: v_proj's rows W_g <- H^T W_g (and bias) per kv head,
    o_proj's columns W[:, h] <- W[:, h] H per query head. Attention mixes value rows across tokens
    with per-head weights, so each head's output is rotated by H too, and o_proj undoes it."""
    hd = h.shape[0]
    v, o = attn.v_proj, attn.o_proj
    wv = v.weight.double().reshape(-1, hd, v.in_features)  # [kv heads, hd, d]
    v.weight.copy_(torch.einsum("ji,gjd->gid", h, wv).reshape(v.weight.shape).to(v.weight.dtype))
    if v.bias is not None:
        v.bias.copy_((v.bias.double().reshape(-1, hd) @ h).reshape(-1).to(v.bias.dtype))
    wo = o.weight.double().reshape(o.out_features, -1, hd)  # [d, q heads, hd]
    o.weight.copy_((wo @ h).reshape(o.weight.shape).to(o.weight.dtype))


def _has(mod: nn.Module, path: str) -> bool:
    try:
        mod.get_submodule(path)
        return True
    except AttributeError:
        return False


def _check_rms_norm(norm: nn.Module, where: str) -> None:
    name = type(norm).__name__
    # RMSNorm commutes with an orthogonal Q; LayerNorm's mean subtraction does not, and Gemma's norm
    # scales by (1 + weight), which folding as gamma would get wrong.
    if "RMSNorm" not in name or "Gemma" in name or getattr(norm, "bias", None) is not None:
        raise ValueError(f"{where}: {name} is not a plain RMSNorm (x / rms(x) * weight); cannot rotate")
    if not isinstance(getattr(norm, "weight", None), torch.Tensor):
        raise ValueError(f"{where}: {name} has no weight")


@torch.no_grad()
def rotate_residual(
    model: nn.Module, kind: str = "hadamard", seed: int = 0, heads: bool = False
) -> RotationReport:
    """Rotate ``model``'s residual stream in place (float model, before quantizing); see the module
    docstring. The rotated model computes the same function up to float rounding."""
    inner, layers = _decoder_parts(model)
    d = inner.norm.weight.shape[0]
    q64 = rotation_matrix(d, kind, seed)
    hq = None
    if heads:
        hd = _head_dim(inner, layers[0].self_attn)
        hq = rotation_matrix(hd, kind, seed + 1)

    def fold_in(lin: nn.Linear, gamma: torch.Tensor) -> None:
        w = lin.weight.double() * gamma.double()[None, :]
        lin.weight.copy_((w @ q64).to(lin.weight.dtype))

    def fold_out(lin: nn.Linear) -> None:
        lin.weight.copy_((q64.T @ lin.weight.double()).to(lin.weight.dtype))
        if lin.bias is not None:
            lin.bias.copy_((lin.bias.double() @ q64).to(lin.bias.dtype))

    for layer in layers:
        for norm_path, readers in (
            ("input_layernorm", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
            ("post_attention_layernorm", ("mlp.gate_proj", "mlp.up_proj")),
        ):
            norm = layer.get_submodule(norm_path)
            gamma = norm.weight.detach().clone()
            for r in readers:
                fold_in(layer.get_submodule(r), gamma)
            norm.weight.fill_(1.0)
        fold_out(layer.self_attn.o_proj)
        fold_out(layer.mlp.down_proj)
        if heads:
            _rotate_heads(layer.self_attn, hq)
    dtype = inner.norm.weight.dtype
    inner.embed_tokens = RotateOutput(inner.embed_tokens, q64.to(dtype))
    inner.norm = UnrotateInput(inner.norm, q64.to(dtype))
    return RotationReport(kind=kind, seed=seed, hidden=d, layers=len(layers))
