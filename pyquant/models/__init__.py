"""Recipes, data and metrics for the offline test models (docs: models/README.md)."""

from pyquant.models.hf import CausalLMLogits, EncoderHidden, MissingModelPackage, cache_dir, package_dir
from pyquant.models.recipes import RECIPES, ModelRecipe, get_recipe, parse_scheme, recipe_for_hf_dir

__all__ = [
    "RECIPES",
    "CausalLMLogits",
    "EncoderHidden",
    "MissingModelPackage",
    "ModelRecipe",
    "cache_dir",
    "get_recipe",
    "package_dir",
    "parse_scheme",
    "recipe_for_hf_dir",
]
