#!/usr/bin/env bash
# One GPU machine run: build the package there (kernels for sm_90, and the TensorRT plugin library when TensorRT
# headers were carried), then the steps asked for:
#   tests      every test in 8 concurrent shards (GPU tests included), one summary line per shard
#   gpu-tests  the GPU tests only, likewise
#   hygiene  benchmarks/kernel_hygiene.sh (compute-sanitizer memcheck / racecheck, determinism)
#   serve    benchmarks/serve_decode.py (decode through the runtime, replay vs conventional)
#   breakdown  benchmarks/step_breakdown.py (a decode step's GPU time by kernel category, Super b256)
# Usage (repo root, on the GPU machine): bash benchmarks/device_run.sh OUT_DIR tests hygiene serve
# TensorRT headers: RSSM_TENSORRT_INCLUDE_DIR, or a folder .cache/tensorrt-headers/include carried along.
set -o pipefail
out=${1:?output folder}; shift
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
if [ -z "${RSSM_TENSORRT_INCLUDE_DIR:-}" ] && [ -d .cache/tensorrt-headers/include ]; then
  export RSSM_TENSORRT_INCLUDE_DIR=$PWD/.cache/tensorrt-headers/include
fi
# The exporter's packages, when the machine lacks them: wheels carried in .cache/wheels_export (onnxscript,
# onnx_ir, ml_dtypes; pip download them on a machine with an index), installed without dependencies.
for pair in onnxscript:onnxscript onnx_ir:onnx_ir ml_dtypes:ml_dtypes; do
  mod=${pair%%:*}; whl=${pair##*:}
  python3 -c "import $mod" 2>/dev/null || python3 -m pip install -q --no-deps --no-index .cache/wheels_export/$whl-*.whl
done
t0=$(date +%s)
if [ -z "${SKIP_BUILD:-}" ]; then  # SKIP_BUILD=1: a second run beside one that built (never two builds at once)
  RSSM_CUDA_ARCHS=${RSSM_CUDA_ARCHS:-90} python3 -m pip install -q --no-build-isolation --no-deps -e . \
    > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
fi
sharded() {  # name [pytest options]: every test in 8 concurrent shards; one summary line per shard; fails on a failure
  local name=$1; shift
  local logs
  logs=$(mktemp -d)
  for shard in 0 1 2 3 4 5 6 7; do
    RSSM_TEST_SHARD=$shard/8 OMP_NUM_THREADS=2 python3 -m pytest -q -rfE "$@" -p no:cacheprovider tests \
      > "$logs/$shard.log" 2>&1 &
  done
  wait
  cat "$logs"/[0-7].log > "$out/$name.log"
  grep -hE "^(FAILED|ERROR)|[0-9]+ (passed|failed)" "$logs"/[0-7].log | tail -40
  ! grep -qE "^(FAILED|ERROR)" "$logs"/[0-7].log
}
status=0
for step in "$@"; do
  t0=$(date +%s)
  case $step in
    tests) sharded tests || status=1 ;;
    gpu-tests) sharded gpu_tests -m gpu || status=1 ;;  # the GPU tests only
    hygiene) bash benchmarks/kernel_hygiene.sh "$out" | tail -20 || status=1 ;;
    serve) python3 benchmarks/serve_decode.py --out "$out/serve_decode.md" ${SERVE_ARGS:-} 2>&1 | tail -20 || status=1 ;;  # SERVE_ARGS: extra options
    breakdown) python3 benchmarks/step_breakdown.py --batch 256 --out "$out/step_breakdown.md" 2>&1 | tail -25 || status=1 ;;
    *) echo "unknown step $step"; status=2 ;;
  esac
  echo "$step: $(( $(date +%s) - t0 )) s"
done
exit $status
