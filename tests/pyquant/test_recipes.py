"""Recipe scheme names -> quantize configs (no model loading)."""

import pytest

from pyquant.config import Fp8Config, Int4Config
from pyquant.models import get_recipe


def test_mlp_only_scheme_keeps_attention_float():
    cfg = get_recipe("smollm2").quantize_config("fp8-mlp")
    assert isinstance(cfg.default, Fp8Config)
    assert tuple(cfg.include) == ("*.mlp.*",) and "lm_head" in cfg.exclude


def test_plain_schemes_quantize_everything_but_kept_layers():
    cfg = get_recipe("smollm2").quantize_config("int4-b64")
    assert isinstance(cfg.default, Int4Config) and cfg.default.block_size == 64
    assert tuple(cfg.include) == ("*",)


def test_mlp_suffix_needs_recipe_support():
    with pytest.raises(ValueError, match="no MLP layers"):
        get_recipe("minilm").quantize_config("fp8-mlp")
