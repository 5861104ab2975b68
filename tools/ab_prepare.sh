#!/usr/bin/env bash
# tools/ab_prepare.sh REF: exports revision REF of this repository (a branch, tag or commit) to
# .ab-ref/, git-ignored: side A of `tools/gpu_run.sh ab`, this tree being side B. Carry it to the
# GPU machine with the tree (carry: [".ab-ref"]). The reference runs (bench/results) stay out:
# the build does not need them, and the device takes 64 MiB per call.
set -euo pipefail
cd "$(dirname "$0")/.."
ref=${1:?usage: tools/ab_prepare.sh REF (a branch, tag or commit)}
rev=$(git rev-parse --short "$ref^{commit}")
rm -rf .ab-ref
mkdir -p .ab-ref
git archive --format=tar "$rev" | tar -x -C .ab-ref --exclude='bench/results'
echo "$ref ($rev)" >.ab-ref/REVISION
echo "ab_prepare: .ab-ref holds $ref ($rev), $(du -sh .ab-ref | cut -f1); carry: [\".ab-ref\"]"
