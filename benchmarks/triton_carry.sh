#!/usr/bin/env bash
# Prepares, on a machine with pip access, what benchmarks/device_triton.sh needs on a GPU machine that has no
# package index (Python 3.12, x86-64): the folder .cache/triton_carry (git-ignored; never committed), to be
# carried along with the working tree:
#   server.tar.xz  tritonserver 2.51 and its Python backend from the nvidia-pytriton 0.7.0 wheel, trimmed to what
#                  the server needs: pytriton/tritonserver/{bin,backends,caches}, the stub for Python PYVER and
#                  nvidia_pytriton.libs without its libpython (the stub uses the GPU machine's own)
#   wheels/        numpy 1.26.4 (the Python backend returns empty outputs with numpy 2) and FastAPI / uvicorn with
#                  their dependencies, for `trtllm-replayssm serve`
# Usage (repo root): bash benchmarks/triton_carry.sh [OUT]     then carry OUT (default .cache/triton_carry)
# PYVER (default 3.12): the GPU machine's Python; another version makes a carry to try device_triton.sh here.
set -euo pipefail
out=${1:-.cache/triton_carry}
pyver=${PYVER:-3.12}
dl=.cache/triton_download/$pyver
py=${PYTHON:-python3}
target=(--only-binary :all: --python-version "$pyver" --implementation cp --platform manylinux_2_35_x86_64
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
mkdir -p "$dl/serve"
rm -rf "$out" && mkdir -p "$out/wheels"
"$py" -m pip download -q --no-deps "${target[@]}" -d "$dl" nvidia-pytriton==0.7.0 numpy==1.26.4
"$py" -m pip download -q "${target[@]}" -d "$dl/serve" fastapi uvicorn
cp "$dl"/numpy-1.26.4-*.whl "$dl"/serve/*.whl "$out/wheels/"

unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked"' EXIT
"$py" -m zipfile -e "$dl"/nvidia_pytriton-0.7.0-*.whl "$unpacked"
keep=(pytriton/__init__.py pytriton/tritonserver/bin pytriton/tritonserver/backends pytriton/tritonserver/caches
      "pytriton/tritonserver/python_backend_stubs/$pyver" nvidia_pytriton.libs)
rm -f "$unpacked"/nvidia_pytriton.libs/libpython3*
chmod +x "$unpacked"/pytriton/tritonserver/bin/tritonserver \
         "$unpacked/pytriton/tritonserver/python_backend_stubs/$pyver/triton_python_backend_stub"
tar -C "$unpacked" -cf - "${keep[@]}" | xz -T0 -6 > "$out/server.tar.xz"
du -b "$out/server.tar.xz" "$out"/wheels/*.whl | sort -n
echo "total: $(du -sb "$out" | cut -f1) bytes in $out"
