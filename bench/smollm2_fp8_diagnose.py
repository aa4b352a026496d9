"""Which part of FP8 costs SmolLM2 its perplexity: weights vs activations, per layer type.

    python bench/smollm2_fp8_diagnose.py --seqs 4            # the per-type table (torch eager)
    python bench/smollm2_fp8_diagnose.py --seqs 4 --only down --only o
    python bench/smollm2_fp8_diagnose.py --layer-errors        # per-layer output MSE: RTN, GPTQ, rotation
    python bench/smollm2_fp8_diagnose.py --float-positions 1 --float-positions 4   # attention-sink test
    python bench/smollm2_fp8_diagnose.py --seqs 8 --compensate 16   # bias correction / GPTQ (16 calib seqs)
    python bench/smollm2_fp8_diagnose.py --seqs 8 --compensate 16 --weights-only   # float activations

Every nn.Linear of the decoder (lm_head stays float, as in the recipe) is simulated with LinearFp8's
numerics, separately switchable for the weights (RTN e4m3, per-channel scales = the ``fp8`` scheme's
layout, dequantized to float32) and the activations (the op's bit-exact dynamic per-token e4m3
quantization, ``pyquant.torch_ops.quantize_activations_fp8``). Each row quantizes one layer type
(q, k, v, o, gate, up, down) in all 30 blocks, or everything. Reported per row: wiki perplexity
change vs float on the first ``--seqs`` x 512 evaluation tokens, and the mean next-token KL(float ||
quantized) in nats/token (smoother than perplexity on a small slice).

Other modes (all FP8 on, weights and activations):
  --layer-errors      relative output MSE of every linear on 2 x 512 calibration tokens (its float
                      input), mean per type: weights only, activations only, both; the same after a
                      random orthogonal rotation of the input space (x R, W R: what a QuaRot-style
                      rotation would do to the FP8 error), and with GPTQ weights (Hessian from the same
                      tokens, i.e. in-sample)
  --float-positions P the first P positions of every sequence computed in float (attention-sink test)
  --compensate N      bias correction (b = W E[x] - W_q E[Q(x)] over 4 calibration sequences, inputs
                      from the FP8 model) and FP8 GPTQ with a Hessian from N calibration sequences,
                      alone and together
Calibration sequences follow the 8 evaluation sequences in the wiki stream (disjoint from them).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from pyquant import torch_ops
from pyquant.algorithms import get_weight_quantizer
from pyquant.config import Fp8Config
from pyquant.models import get_recipe
from pyquant.models.data import wiki_token_sequences

TYPES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class SimFp8(nn.Module):
    """nn.Linear with optional FP8 weights (dequantized) and FP8 per-token activations."""

    def __init__(self, lin: nn.Linear, wq: torch.Tensor) -> None:
        super().__init__()
        self.w, self.wq, self.bias = lin.weight.data, wq, lin.bias
        self.fp8_w = self.fp8_a = False
        self.float_positions = 0  # the first positions of each sequence stay float (sink test)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x0 = x
        if self.fp8_a:
            xq, s = torch_ops.quantize_activations_fp8(x.reshape(-1, x.shape[-1]), None)
            x = (xq.float() * s).reshape(x.shape).to(x.dtype)
        y = F.linear(x, self.wq if self.fp8_w else self.w, self.bias)
        if self.float_positions and x0.dim() == 3:
            p = self.float_positions
            y = y.clone()
            y[:, :p] = F.linear(x0[:, :p], self.w, None if self.bias is None else self.bias)
        return y


def install(model: nn.Module, block: int = 0) -> dict[str, SimFp8]:
    fn, _ = get_weight_quantizer("fp8", "rtn")
    sims = {}
    for name, mod in list(model.named_modules()):
        if isinstance(mod, nn.Linear) and name != "lm_head":
            p = fn(mod.weight.data, Fp8Config(weight_block_size=block), None)
            sim = SimFp8(mod, torch_ops.dequantize_fp8(p.weight, p.w_scale, block))
            parent, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent), attr, sim)
            sims[name] = sim
    return sims


def score(model: nn.Module, ids: torch.Tensor, ref: list[torch.Tensor] | None) -> tuple[float, float, list]:
    """-> (perplexity, mean KL(ref || model) per token, log-probs per batch)."""
    nll, n, kl, outs = 0.0, 0, 0.0, []
    with torch.inference_mode():
        for i in range(0, len(ids), 2):
            x = ids[i : i + 2]
            lp = torch.log_softmax(model(input_ids=x, use_cache=False).logits[:, :-1].double(), -1)
            outs.append(lp)
            nll -= float(lp.gather(-1, x[:, 1:, None]).sum())
            n += x[:, 1:].numel()
            if ref is not None:
                r = ref[i // 2]
                kl += float((r.exp() * (r - lp)).sum())
    return float(torch.exp(torch.tensor(nll / n))), kl / n, outs


def _qx(x: torch.Tensor) -> torch.Tensor:
    xq, s = torch_ops.quantize_activations_fp8(x, None)
    return xq.float() * s


def layer_errors(model: nn.Module, cal: torch.Tensor) -> None:
    from pyquant.algorithms import CalibrationStats

    rtn, _ = get_weight_quantizer("fp8", "rtn")
    gptq, _ = get_weight_quantizer("fp8", "gptq")
    cfg = Fp8Config(weight_block_size=0)

    def qw(w: torch.Tensor, fn=rtn, st=None) -> torch.Tensor:  # noqa: ANN001
        p = fn(w, cfg, st)
        return torch_ops.dequantize_fp8(p.weight, p.w_scale, 0)

    g = torch.Generator().manual_seed(1)
    rots: dict[int, torch.Tensor] = {}
    acc: dict[str, dict[str, float]] = {}
    n_layers = sum(1 for n, m in model.named_modules() if n.endswith(".q_proj"))

    def hook(name: str):  # noqa: ANN202
        def h(m: nn.Module, a: tuple) -> None:
            x = a[0].reshape(-1, m.in_features).float()
            w = m.weight.data
            if m.in_features not in rots:
                z = torch.randn(m.in_features, m.in_features, generator=g, dtype=torch.float64)
                rots[m.in_features] = torch.linalg.qr(z)[0].float()
            r = rots[m.in_features]
            y = x @ w.T
            ny = float((y**2).sum())
            xr, wr = x @ r, w @ r
            wq, wrq = qw(w), qw(wr)
            wg = qw(w, gptq, CalibrationStats(hessian=x.T @ x))
            res = {
                "w": x @ (w - wq).T,
                "a": (_qx(x) - x) @ w.T,
                "both": _qx(x) @ wq.T - y,
                "w_rot": xr @ (wr - wrq).T,
                "a_rot": (_qx(xr) - xr) @ wr.T,
                "both_rot": _qx(xr) @ wrq.T - y,
                "w_gptq": x @ (w - wg).T,
                "both_gptq": _qx(x) @ wg.T - y,
            }
            d = acc.setdefault(name.rsplit(".", 1)[-1], {})
            for k, e in res.items():
                d[k] = d.get(k, 0.0) + float((e**2).sum()) / ny / n_layers

        return h

    hs = [
        m.register_forward_pre_hook(hook(n))
        for n, m in model.named_modules()
        if isinstance(m, nn.Linear) and n != "lm_head"
    ]
    with torch.inference_mode():
        model(input_ids=cal, use_cache=False)
    for h in hs:
        h.remove()
    keys = list(next(iter(acc.values())))
    print("relative output MSE x 1e4 (mean over layers; *_rot: random orthogonal rotation; gptq in-sample)")
    print("type      " + " ".join(f"{k:>9s}" for k in keys))
    for t, d in acc.items():
        print(f"{t:9s} " + " ".join(f"{d[k] * 1e4:9.2f}" for k in keys))


def compensate(  # noqa: PLR0913
    model: nn.Module,
    sims: dict[str, SimFp8],
    tok,  # noqa: ANN001
    ids: torch.Tensor,
    ref: list[torch.Tensor],
    base: float,
    n_cal: int,
    acts: bool = True,
) -> None:
    """acts=False: weight-only FP8 (activations stay float in every step, calibration included)."""
    from pyquant.algorithms import CalibrationStats

    cal = torch.from_numpy(wiki_token_sequences(tok, max(n_cal, 4), 512, offset_seqs=8))
    gptq, _ = get_weight_quantizer("fp8", "gptq")

    def calibrate(quantized: bool, seqs: int, hessian: bool) -> dict[str, list]:
        st: dict[str, list] = {n: [0, 0, 0, 0] for n in sims}

        def h(m: nn.Module, a: tuple, n: str) -> None:
            x = a[0].reshape(-1, a[0].shape[-1]).float()
            d = st[n]
            if hessian:
                d[3] = d[3] + x.double().T @ x.double()
            else:
                xq = _qx(x) if acts else x
                d[0], d[1], d[2] = d[0] + x.sum(0), d[1] + xq.sum(0), d[2] + x.shape[0]

        hs = [s.register_forward_pre_hook(lambda m, a, n=n: h(m, a, n)) for n, s in sims.items()]
        for s in sims.values():
            s.fp8_w, s.fp8_a = quantized, quantized and acts
        with torch.inference_mode():
            for i in range(0, seqs, 2):
                model(input_ids=cal[i : i + 2], use_cache=False)
        for hh in hs:
            hh.remove()
        for s in sims.values():
            s.fp8_w, s.fp8_a = True, acts
        return st

    def bias_correct() -> None:
        st = calibrate(True, 4, False)
        for n, s in sims.items():
            mx, mq, c, _ = st[n]
            s.bias = s.w @ (mx / c) - s.wq @ (mq / c)

    def report(label: str) -> None:
        p, kl, _ = score(model, ids, ref)
        print(f"{label:36s} {p:8.4f} {100 * (p / base - 1):+8.2f} {kl:9.5f}", flush=True)

    for s in sims.values():
        s.fp8_w, s.fp8_a = True, acts
    report("rtn" if acts else "rtn, weights only")
    bias_correct()
    report("rtn + bias correction")
    for s in sims.values():
        s.bias = None
    st = calibrate(False, n_cal, True)
    for n, s in sims.items():
        p = gptq(s.w, Fp8Config(weight_block_size=0), CalibrationStats(hessian=st[n][3].float()))
        s.wq = torch_ops.dequantize_fp8(p.weight, p.w_scale, 0)
    report(f"gptq ({n_cal} calib seqs)")
    bias_correct()
    report(f"gptq ({n_cal}) + bias correction")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqs", type=int, default=4, help="evaluation sequences of 512 tokens (recipe: 8)")
    ap.add_argument("--only", action="append", default=None, help="layer types to run (q, k, ..., all)")
    ap.add_argument("--block", type=int, default=0, help="FP8 weight block along K (0: per channel)")
    ap.add_argument("--layer-errors", action="store_true")
    ap.add_argument("--float-positions", type=int, action="append", default=None)
    ap.add_argument("--compensate", type=int, default=0, metavar="N_CALIB_SEQS")
    ap.add_argument(
        "--weights-only", action="store_true", help="with --compensate: FP8 weights, float activations"
    )
    args = ap.parse_args()
    torch.manual_seed(0)
    recipe = get_recipe("smollm2")
    model, tok = recipe.load()
    if args.layer_errors:
        layer_errors(model, torch.from_numpy(wiki_token_sequences(tok, 2, 512, offset_seqs=8)))
        return
    ids = torch.from_numpy(wiki_token_sequences(tok, args.seqs, 512))
    t0 = time.perf_counter()
    base, _, ref = score(model, ids, None)
    print(
        f"float ppl {base:.4f} ({args.seqs}x512 tokens, {time.perf_counter() - t0:.0f} s per pass)",
        flush=True,
    )
    sims = install(model, args.block)
    if args.float_positions or args.compensate:
        print(f"{'all linears FP8':36s} {'ppl':>8s} {'delta %':>8s} {'KL nats':>9s}")
    if args.compensate:
        compensate(model, sims, tok, ids, ref, base, args.compensate, acts=not args.weights_only)
        return
    if args.float_positions:
        for s in sims.values():
            s.fp8_w = s.fp8_a = True
            s.float_positions = 0
        for fp in args.float_positions:
            for s in sims.values():
                s.float_positions = fp
            p, kl, _ = score(model, ids, ref)
            print(f"{f'first {fp} positions float':36s} {p:8.4f} {100 * (p / base - 1):+8.2f} {kl:9.5f}")
        return
    groups = [(t.split("_")[0], (t,)) for t in TYPES] + [("all", TYPES)]
    if args.only:
        groups = [g for g in groups if g[0] in args.only]
    print(f"{'layers':6s} {'what':8s} {'ppl':>8s} {'delta %':>8s} {'KL nats':>9s}")
    for label, types in groups:
        for what, w, a in (("weights", True, False), ("acts", False, True), ("both", True, True)):
            for name, s in sims.items():
                on = name.rsplit(".", 1)[-1] in types
                s.fp8_w, s.fp8_a = on and w, on and a
            p, kl, _ = score(model, ids, ref)
            print(f"{label:6s} {what:8s} {p:8.4f} {100 * (p / base - 1):+8.2f} {kl:9.5f}", flush=True)


if __name__ == "__main__":
    main()
