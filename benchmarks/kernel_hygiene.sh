#!/usr/bin/env bash
# Kernel hygiene on a CUDA device: compute-sanitizer memcheck and racecheck over every kernel family and every
# TensorRT plugin's enqueue (through the GPU tests that drive them), and run-to-run bitwise determinism of decode,
# verify and flush. Writes OUT_DIR/kernel_hygiene.md (the summary) and the sanitizer logs.
#
#   bash benchmarks/kernel_hygiene.sh OUT_DIR      # repo root, package installed with its kernel library
#
# The GPU tests of each kernel family run under the sanitizer, dealt by test (RSSM_TEST_SHARD, tests/conftest.py):
# every test file (family) contributes its share (1/24 of the tests under memcheck, another 1/48 under
# racecheck by default: MEMCHECK_SHARD, RACECHECK_SHARD), so every family and plugin is exercised without the whole
# suite's hours under the tools; each tool stops after HYGIENE_TIMEOUT seconds (300), and a stopped run shows as
# exit code 124 in the summary. PyTorch's caching allocator is off, so every tensor is its own allocation and an
# access past its end is seen. The plugin driver (a subprocess) is followed (--target-processes all).
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 OMP_NUM_THREADS=2
files=$(ls tests/test_*kernels*.py tests/test_tensorrt_plugin_gpu.py tests/test_prefill*.py 2>/dev/null | tr '\n' ' ')
run_tool() {  # label tool shard-spec files...
  local label=$1 tool=$2 shard=$3; shift 3
  RSSM_TEST_SHARD=$shard timeout "${HYGIENE_TIMEOUT:-300}" compute-sanitizer --tool "$tool" --target-processes all --error-exitcode 86 \
    --print-limit 20 python3 -m pytest -q -p no:cacheprovider -m gpu "$@" > "$out/sanitize_$label.log" 2>&1
  echo $? > "$out/sanitize_$label.rc"
}
# Every plugin's enqueue: the plugin nodes of the exported tiny models (tests/test_export_gpu.py: the ten plugins,
# replay / conventional / speculative, run through the plugin driver), whole, under both tools.
plugins=tests/test_export_gpu.py
run_tool memcheck memcheck "${MEMCHECK_SHARD:-0/24}" $files &
run_tool racecheck racecheck "${RACECHECK_SHARD:-1/48}" $files &
run_tool memcheck-plugins memcheck 0/1 $plugins &
run_tool racecheck-plugins racecheck 0/1 $plugins &
wait
python3 benchmarks/determinism.py --out "$out/determinism.md" > "$out/determinism.log" 2>&1
det=$?
summary() {  # tool
  local log=$out/sanitize_$1.log rc
  rc=$(cat "$out/sanitize_$1.rc")
  local errors tests
  errors=$(grep -oE "ERROR SUMMARY: [0-9]+ error" "$log" | awk '{s += $3} END {print s + 0}')
  tests=$(grep -E "[0-9]+ passed" "$log" | tail -1)
  echo "| $1 | ${tests:-no test summary} | $errors | $rc |"
}
{
  echo "# Kernel hygiene (compute-sanitizer, determinism)"
  echo
  echo "Produced by \`bash benchmarks/kernel_hygiene.sh OUT\` on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)."
  echo "Test files under the tools: memcheck / racecheck: $files (shards); -plugins: $plugins (whole)"
  echo
  echo "| tool | tests (pytest summary) | errors reported | exit code |"
  echo "|---|---|---|---|"
  summary memcheck
  summary racecheck
  summary memcheck-plugins
  summary racecheck-plugins
  echo
  echo "Determinism (benchmarks/determinism.py, exit code $det):"
  echo
  cat "$out/determinism.md" 2>/dev/null || tail -5 "$out/determinism.log"
} > "$out/kernel_hygiene.md"
cat "$out/kernel_hygiene.md"
