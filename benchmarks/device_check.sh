#!/usr/bin/env bash
# The kernel benchmarks in one GPU machine run: build the package there, run every test (GPU ones included), then
# the benchmarks (Mamba-2 decode, GDN decode, speculative step).
# Usage (repo root, on the GPU machine): bash benchmarks/device_check.sh OUT_DIR [bench_mamba2 args...]
# Needs mamba-ssm's source distribution at .cache/mamba_ssm.tar.gz (git-ignored; carry .cache to the device).
# Fetch it on a machine with network access:
#   python3 -m pip download --no-deps --no-binary :all: -d .cache mamba-ssm && mv .cache/mamba_ssm-*.tar.gz .cache/mamba_ssm.tar.gz
# The GDN benchmark runs too when fla-core's wheel is at .cache/wheels/fla_core-0.6.0-py3-none-any.whl
# (python3 -m pip download --no-deps -d .cache/wheels fla-core==0.6.0); its extra arguments come from the
# environment variable GDN_ARGS (split on spaces), e.g. GDN_ARGS="--shapes Qwen3.5-4B --batches 64,256".
set -o pipefail
out=${1:?output folder}; shift
export PYTHONUNBUFFERED=1
fla_wheel=.cache/wheels/fla_core-0.6.0-py3-none-any.whl
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
# The TensorRT plugins and their GPU driver too, when TensorRT's headers were carried (.cache/trt/include-*).
trt_inc=$(ls -d .cache/trt/include-11 2>/dev/null || ls -d .cache/trt/include-* 2>/dev/null | head -1)
[ -n "$trt_inc" ] && export RSSM_TENSORRT_INCLUDE_DIR="$PWD/$trt_inc"
python3 -m pip install -q --no-build-isolation --no-deps -e . 2>&1 | tail -3 || exit 1
# The tests in 8 concurrent shards, dealt by test (RSSM_TEST_SHARD, tests/conftest.py), 2 CPU threads each: the
# GPU and 16 cores take them side by side (the whole suite in ~2 minutes on the H200); one summary line per
# shard, failures listed.
# Output files stay few (tests.log, bench.log, the tables and their JSON): the device tool returns a handful.
logs=$(mktemp -d)
for shard in 0 1 2 3 4 5 6 7; do
  RSSM_TEST_SHARD=$shard/8 OMP_NUM_THREADS=2 python3 -m pytest -q -rfE -p no:cacheprovider tests \
    > "$logs/tests_$shard.log" 2>&1 &
done
wait
cat "$logs"/tests_[0-7].log > "$out/tests.log"
grep -hE "^(FAILED|ERROR)|[0-9]+ (passed|failed)" "$logs"/tests_[0-7].log | tail -40
python3 benchmarks/bench_mamba2.py --mamba-ssm-sdist .cache/mamba_ssm.tar.gz --out "$out/mamba2_decode.md" \
  --json "$out/mamba2_decode.json" "$@" 2>&1 | tee "$out/bench.log" | tail -40
status=$?
if [ -f "$fla_wheel" ]; then
  # shellcheck disable=SC2086  # GDN_ARGS is a list of arguments
  python3 benchmarks/bench_gdn.py --fla-wheel "$fla_wheel" --out "$out/gdn_decode.md" \
    --json "$out/gdn_decode.json" ${GDN_ARGS:-} 2>&1 | tee -a "$out/bench.log" | tail -40
  gdn_status=$?
  [ "$status" -eq 0 ] && status=$gdn_status
fi
# The speculative step (both families; extra arguments from SPEC_ARGS, e.g. SPEC_ARGS="--batches 256 --windows 8").
# shellcheck disable=SC2086  # SPEC_ARGS is a list of arguments
python3 benchmarks/bench_spec.py --out "$out/spec_decode.md" --json "$out/spec_decode.json" ${SPEC_ARGS:-} 2>&1 |
  tee -a "$out/bench.log" | tail -20
spec_status=$?
[ "$status" -eq 0 ] && status=$spec_status
exit "$status"
