#!/usr/bin/env bash
# The main demo on a fresh machine: set up, build, then run ATB's documented AllToAllVV2 example
# (2 ranks, configured by examples/json/all_to_allvv2_seed.json) and print each rank's output.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build -DCOLLOPS_WITH_TORCH=OFF >/dev/null
build/examples/collops_json_demo examples/json/all_to_allvv2_seed.json
