#!/usr/bin/env bash
# Address-sanitiser run of deep_gemm's host kernels over the host tests (`make asan`).
# The kernels are rebuilt with -fsanitize=address (separate cache entries); Python itself is not
# instrumented, so the ASan runtime is preloaded.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export DG_HOST_SANITIZE=address
export LD_PRELOAD="$(${CXX:-g++} -print-file-name=libasan.so)"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1"
exec .venv/bin/python -m pytest tests/deep_gemm/host -q -x -p no:cacheprovider "$@"
