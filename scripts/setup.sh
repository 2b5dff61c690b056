#!/usr/bin/env bash
# One entry point for a fresh Debian 12 machine (run as root, from the repository root):
#   scripts/setup.sh run    install what is missing, build (Release, kernels dispatched at run time), run the default model
#   scripts/setup.sh test   install what is missing, build, run the whole test suite (ctest)
#   scripts/setup.sh build  install what is missing and build
#   scripts/setup.sh test-arm  install what is missing, cross-build the kernels and their twin tests for aarch64
#                           (NEON) in build-arm/ and run them under qemu-aarch64
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-build}
build_dir=${OFFGRID_BUILD_DIR:-build}
jobs=${OFFGRID_JOBS:-2}

# Debian packages the build and the tests need; clang and libclang-rt only for the fuzz targets; cpp-httplib and
# nlohmann-json for `offgrid serve` (node and npm, when present, run the OpenAI-client test; it skips otherwise);
# python3 for the Python package (python/) and its tests; wamerican's word list for the built-in model's
# dictionary-word test; the aarch64 cross compiler, qemu-user and GoogleTest's sources for test-arm; Open MPI for
# the layer pipeline over MPI ranks and its tests (docs/distributed.md).
# tools/train/ has its own setup.sh.
packages=(g++ cmake ninja-build pkg-config libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev
          libcpp-httplib-dev nlohmann-json3-dev python3 wamerican g++-aarch64-linux-gnu qemu-user googletest
          openmpi-bin libopenmpi-dev)

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

if [ "$mode" = test-arm ]; then
    # Only the kernel libraries and their tests (OFFGRID_KERNELS_ONLY); ctest runs each test binary through
    # qemu-aarch64 -L /usr/aarch64-linux-gnu (the toolchain file's emulator).
    arm_dir=${OFFGRID_ARM_BUILD_DIR:-build-arm}
    cmake -S . -B "$arm_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
          -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DOFFGRID_KERNELS_ONLY=ON -DOFFGRID_BENCH=OFF
    cmake --build "$arm_dir" -j "$jobs"
    exec ctest --test-dir "$arm_dir" --output-on-failure -j "$jobs"
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
        echo "setup: unknown mode '$mode' (run, test, test-arm or build)" >&2
        exit 2
        ;;
esac
