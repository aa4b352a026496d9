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


def test_a8_suffix_sets_int8_activations():
    from pyquant.models import parse_scheme

    assert parse_scheme("int4-b32-a8") == Int4Config(32, accuracy_level=4)
    assert parse_scheme("int4-b128-asym-a8") == Int4Config(128, symmetric=False, accuracy_level=4)
    assert parse_scheme("INT4-A8") == Int4Config(128, accuracy_level=4)
    assert parse_scheme("int4-b64") == Int4Config(64)  # no suffix: level 0
    # on top of a recipe's tuned default
    tuned = {"int4": Int4Config(64, symmetric=False, clip_grid=10)}
    assert parse_scheme("int4-a8", tuned) == Int4Config(64, symmetric=False, clip_grid=10, accuracy_level=4)
    recipe = get_recipe("smollm2")
    tuned_block = recipe.schemes["int4"].block_size  # "int4" without a block: the recipe's default
    for scheme, block, algorithm, act in [
        ("int4-b64-a8-awq", 64, "awq", False),
        ("int4-a8-gptq", tuned_block, "gptq", False),
        ("int4-b32-asym-a8-awq-gptq-act", 32, "awq-gptq", True),
        ("int4-a8-mse", tuned_block, "mse", False),
    ]:
        cfg = recipe.quantize_config(scheme).default
        assert (cfg.block_size, cfg.algorithm, cfg.act_order, cfg.accuracy_level) == (
            block,
            algorithm,
            act,
            4,
        )
    cfg = recipe.quantize_config("int4-a8-mlp-gptq-sq0.5")
    assert cfg.default.accuracy_level == 4 and tuple(cfg.include) == ("*.mlp.*",) and cfg.smoothing == 0.5
    assert recipe.quantize_config("int4-gptq").default.accuracy_level == 0


@pytest.mark.parametrize("scheme", ["fp8-a8", "fp8-b128-static-a8", "fp8-channel-a8-gptq", "float-a8"])
def test_a8_suffix_is_int4_only(scheme):
    with pytest.raises(ValueError, match="-a8 .*applies to INT4 schemes only"):
        get_recipe("smollm2").quantize_config(scheme)


@pytest.mark.parametrize("scheme", ["int4-gptq-a8", "int4-mlp-a8", "int4-awq-a8-gptq", "int4-b64-sq0.5-a8"])
def test_a8_suffix_order(scheme):
    with pytest.raises(ValueError, match="-a8 goes right after the INT4 format"):
        get_recipe("smollm2").quantize_config(scheme)


def test_a8_unknown_scheme_message_lists_the_suffix():
    from pyquant.models import parse_scheme

    with pytest.raises(ValueError, match=r"unknown scheme 'int4-a8-a8'.*int4-b<bs>\[-asym\]\[-a8\]"):
        parse_scheme("int4-a8-a8")
