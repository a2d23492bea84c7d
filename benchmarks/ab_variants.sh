#!/usr/bin/env bash
# A/B of kernel-library variants in one device run: every folder VARIANTS_DIR/<name>/ holds a copy of plugins/
# (e.g. `git archive <commit> plugins | tar -x -C VARIANTS_DIR/<name>`, or an edited copy), or a whole tree
# (`git archive <commit> | tar -x -C ...`), whose Python package is then used with its library (for variants
# that change the C ABI). Each is built with CMake (in parallel) and timed with benchmarks/ab_step.py, twice,
# alternating, so that drift of the machine shows up between the two passes. For plugins-only variants the
# Python package of the working tree must be installed.
# Usage (repo root, GPU machine): bash benchmarks/ab_variants.sh VARIANTS_DIR [ab_step.py args...]
set -o pipefail
dir=${1:?folder of variants}; shift
for v in $(ls "$dir"); do
  (cmake -S "$dir/$v/plugins" -B "/tmp/ab_build_$v" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null &&
   cmake --build "/tmp/ab_build_$v" -j8 > "/tmp/ab_build_$v.log" 2>&1 ||
   { echo "build of $v failed"; tail -20 "/tmp/ab_build_$v.log"; }) &
done
wait
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader
for pass in 1 2; do
  for v in $(ls "$dir"); do
    py=""
    [ -d "$dir/$v/trtllm_replayssm" ] && py="$dir/$v"
    RSSM_LIBRARY="/tmp/ab_build_$v/libreplayssm.so" PYTHONPATH="$py" python3 benchmarks/ab_step.py "$v" "$@"
  done
done
