#!/usr/bin/env bash
# One GPU machine run of benchmarks/triton_vs_serve.py (Triton vs serve throughput, Triton load / unload leak check)
# on a machine without a package index, from what benchmarks/triton_carry.sh prepared in .cache/triton_carry
# (carried along): a virtual environment whose own numpy is 1.26.4 (the Python backend's stub takes its packages
# from the `python3` first on PATH, and returns empty outputs with numpy 2) and which sees the machine's packages
# (torch) after its own; FastAPI / uvicorn for `serve`; tritonserver unpacked into it as nvidia-pytriton installs
# it; this package built and installed into it (kernels for sm_90).
# Usage (repo root, on the GPU machine): bash benchmarks/device_triton.sh OUT [triton_vs_serve.py options]
set -eo pipefail
out=${1:?output folder}; shift
carry=${RSSM_TRITON_CARRY:-.cache/triton_carry}
if [ ! -f "$carry/server.tar.xz" ]; then
  echo "no $carry/server.tar.xz: run benchmarks/triton_carry.sh and carry $carry"; exit 2
fi
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
t0=$(date +%s)
base_sites=$(python3 -c 'import sysconfig; p = sysconfig.get_paths(); print(" ".join({p["purelib"], p["platlib"]}))')
env=${RSSM_TRITON_ENV:-/tmp/rssm-triton-env}
rm -rf "$env"
python3 -m venv --system-site-packages --without-pip "$env"
site=$("$env/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# The machine's packages after the environment's own (a .pth line runs at start-up; addsitedir appends).
for s in $base_sites; do echo "import site; site.addsitedir('$s')"; done > "$site/zz_machine_site_packages.pth"
# The machine's SciPy / scikit-learn are built for its numpy 2 and fail to import under numpy 1.26; transformers
# imports scikit-learn when it finds it. Marked absent (None in sys.modules: find_spec says None, import fails).
echo "import sys; sys.modules.update(dict.fromkeys(('sklearn', 'scipy')))" > "$site/aa_numpy2_only_packages.pth"
"$env/bin/python" -m pip install -q --no-index --no-deps --ignore-installed --no-compile --no-cache-dir \
  "$carry"/wheels/*.whl
python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="tar")' \
  "$carry/server.tar.xz" "$site"  # Python's lzma: no xz program needed
export PATH=$env/bin:$PATH
python -c "import numpy, torch; assert int(numpy.__version__.split('.')[0]) < 2, numpy.__version__; \
print('environment: numpy', numpy.__version__, 'from', numpy.__file__, '| torch', torch.__version__, \
'| cuda', torch.cuda.is_available())"
echo "environment: $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
RSSM_CUDA_ARCHS=${RSSM_CUDA_ARCHS:-90} python -m pip install -q --no-index --no-build-isolation --no-deps -e . \
  > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
status=0
python benchmarks/triton_vs_serve.py "$out" "$@" || status=$?
echo "triton_vs_serve: $(( $(date +%s) - t0 )) s"
exit $status
