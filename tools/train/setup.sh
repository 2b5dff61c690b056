#!/usr/bin/env bash
# Debian packages for tools/train/ (never needed to build, test or run the engine):
#   python3-torch, python3-numpy  the model and the trainer
#   python3-regex                 the tokenizer's pre-tokenizer split (\p{L}, \p{N})
#   libopenblas0-openmp           an optimised BLAS for torch (Debian's default libblas3 is the slow reference)
#   bible-kjv-text, bible-kjv     the King James Bible text and its reader (`bible`)
#   python3.11-doc                the Python documentation (HTML)
#   debian-reference-en, developers-reference, debian-policy, maint-guide, doc-debian, gnu-standards,
#   debian-handbook, fortunes(-min) modern English prose (corpus/debian_prose.py)
#   debian-faq                    an evaluation text, never trained on
#   wamerican                     /usr/share/dict/words, for eval.py's dictionary-word share
set -euo pipefail
packages=(python3-torch python3-numpy python3-regex libopenblas0-openmp bible-kjv-text bible-kjv python3.11-doc
          wamerican debian-reference-en developers-reference debian-policy maint-guide doc-debian gnu-standards
          debian-handbook fortunes fortunes-min debian-faq)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
