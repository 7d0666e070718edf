#!/usr/bin/env bash
# Installs everything collops needs on a fresh Debian 12 machine, then nothing on later runs:
# each package is installed only when it is missing. torch is pinned to exactly 2.13.0 (the CPU
# wheel); a looser pin would pull a multi-GB CUDA build.
set -euo pipefail

# clang and its compiler runtime (libFuzzer, ASan, UBSan): the fuzz harnesses (tests/fuzz/).
APT_PACKAGES=(cmake ninja-build g++ make libgtest-dev libgmock-dev nlohmann-json3-dev libdnnl-dev
              openmpi-bin libopenmpi-dev iproute2 clang libclang-rt-14-dev)
PIP_PACKAGES=("torch==2.13.0" "pybind11>=2.10" "clang-format==23.1.5" "jsonschema>=4.18"
              "pytest>=7" "numpy" "matplotlib" "scikit-build-core==1.1.2" "ruff==0.17.5")

sudo_if_needed() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing_apt=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing_apt+=("$pkg")
done
if [ ${#missing_apt[@]} -gt 0 ]; then
  echo "setup: installing ${missing_apt[*]} (apt)"
  sudo_if_needed apt-get update -qq
  sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing_apt[@]}" >/dev/null
fi

missing_pip=()
python3 -c 'import torch, sys; sys.exit(0 if torch.__version__.split("+")[0] == "2.13.0" else 1)' \
  2>/dev/null || missing_pip+=("torch==2.13.0")
python3 -c 'import pybind11' 2>/dev/null || missing_pip+=("pybind11>=2.10")
[ "$(clang-format --version 2>/dev/null | awk '{print $3}')" = "23.1.5" ] || missing_pip+=("clang-format==23.1.5")
python3 -c 'import jsonschema' 2>/dev/null || missing_pip+=("jsonschema>=4.18")
python3 -c 'import pytest' 2>/dev/null || missing_pip+=("pytest>=7")
python3 -c 'import numpy' 2>/dev/null || missing_pip+=("numpy")
python3 -c 'import matplotlib' 2>/dev/null || missing_pip+=("matplotlib")  # bench/compare plots
# The wheel's build backend (pyproject.toml) and the Python linter and formatter (scripts/format.sh),
# pinned: a formatter's output changes between its versions.
python3 -c 'import importlib.metadata as m, sys; sys.exit(m.version("scikit-build-core") != "1.1.2")' \
  2>/dev/null || missing_pip+=("scikit-build-core==1.1.2")
[ "$(ruff --version 2>/dev/null | awk '{print $2}')" = "0.17.5" ] || missing_pip+=("ruff==0.17.5")
if [ ${#missing_pip[@]} -gt 0 ]; then
  echo "setup: installing ${missing_pip[*]} (pip)"
  python3 -m pip install -q --disable-pip-version-check --no-build-isolation "${missing_pip[@]}"
fi

# DeepSpeed, for the tests of deepspeed.comm inside torch.compile. PyPI has it as a source
# release whose setup.py imports torch and records the one it was built with: built here, against
# the installed torch (--no-build-isolation), pure Python (DS_BUILD_OPS=0), with torch==2.13.0
# required beside it so that resolving its dependencies can never replace torch.
if ! python3 -c 'import importlib.metadata as m, sys; sys.exit(m.version("deepspeed") != "0.19.8")' 2>/dev/null; then
  echo "setup: installing deepspeed==0.19.8 (pip)"
  DS_BUILD_OPS=0 DS_ACCELERATOR=cpu python3 -m pip install -q --disable-pip-version-check \
    --no-build-isolation "deepspeed==0.19.8" "torch==2.13.0"
fi
