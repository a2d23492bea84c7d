#!/usr/bin/env bash
# What one device call runs: build the package there, run every test (GPU ones included), then benchmark.
# Usage (repo root, on the GPU machine): bash benchmarks/device_check.sh OUT_DIR [bench args...]
# Needs mamba-ssm's source distribution at .cache/mamba_ssm.tar.gz (git-ignored; carry .cache to the device).
# Fetch it on a machine with network access:
#   mkdir -p .cache && curl -sL -o .cache/mamba_ssm.tar.gz "$(curl -s https://pypi.org/pypi/mamba-ssm/json |
#     python3 -c 'import sys, json; print([u["url"] for u in json.load(sys.stdin)["urls"] if u["packagetype"] == "sdist"][0])')"
set -o pipefail
out=${1:?output folder}; shift
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
python3 -m pip install -q --no-build-isolation --no-deps -e . 2>&1 | tail -3 || exit 1
python3 -m pytest -q --maxfail=4 tests 2>&1 | tee "$out/tests.log" | tail -25
python3 benchmarks/bench_mamba2.py --mamba-ssm-sdist .cache/mamba_ssm.tar.gz --out "$out/mamba2_decode.md" \
  --json "$out/mamba2_decode.json" "$@" 2>&1 | tee "$out/bench.log" | tail -40
