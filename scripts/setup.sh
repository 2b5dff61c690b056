#!/usr/bin/env bash
# One entry point for a fresh Debian 12 machine (run as root, from the repository root):
#   scripts/setup.sh run    install what is missing, build (Release, kernels dispatched at run time), run the default model
#   scripts/setup.sh test   install what is missing, build, run the whole test suite (ctest)
#   scripts/setup.sh build  install what is missing and build
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-build}
build_dir=${OFFGRID_BUILD_DIR:-build}
jobs=${OFFGRID_JOBS:-2}

# Debian packages the build and the tests need; clang and libclang-rt only for the fuzz targets; cpp-httplib and
# nlohmann-json for `offgrid serve` (node and npm, when present, run the OpenAI-client test; it skips otherwise);
# python3 for the Python package (python/) and its tests; wamerican's word list for the built-in model's
# dictionary-word test. tools/train/ has its own setup.sh.
packages=(g++ cmake ninja-build pkg-config libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev
          libcpp-httplib-dev nlohmann-json3-dev python3 wamerican)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup: missing packages (${missing[*]}); run as root or install them" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build_dir" -j "$jobs"

case "$mode" in
    build) ;;
    run)
        "$build_dir/offgrid" run "${@:2}"
        ;;
    test)
        ctest --test-dir "$build_dir" --output-on-failure -j "$jobs"
        ;;
    *)
        echo "setup: unknown mode '$mode' (run, test or build)" >&2
        exit 2
        ;;
esac
