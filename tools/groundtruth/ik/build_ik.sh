#!/usr/bin/env bash
# Build the ik_llama.cpp used for the ik ground-truth fixtures and our `ikkv` dry-run tool.
#
# Source: the ik_llama.cpp tree vendored in the `ik-llama-cpp-python==0.1.5` sdist on PyPI
#         (vendor/ik_llama.cpp; the sdist carries no git metadata, see `version` in the fixtures).
#
# Usage: tools/groundtruth/ik/build_ik.sh OUT_DIR [BUILD_DIR]
#
#   OUT_DIR    where the sdist is downloaded and unpacked (OUT_DIR/ik_llama_cpp_python-0.1.5/vendor/ik_llama.cpp)
#   BUILD_DIR  CMake build dir (default OUT_DIR/build). An existing, configured build dir is reused as is.
#
# Environment: PYTHON (default: python3) runs `pip download`; JOBS (default: 2) for the build.
#
# Only the libraries are built (llama, ggml, common: tens of minutes on 2 cores, most of it ggml's iqk kernels);
# then ikkv.cpp is compiled against them. Result: BUILD_DIR/bin/ikkv
set -euo pipefail

if [ $# -lt 1 ]; then
    sed -n '2,15p' "$0"
    exit 2
fi

OUT=$(realpath -m "$1")
BUILD=$(realpath -m "${2:-$OUT/build}")
PYTHON=${PYTHON:-python3}
JOBS=${JOBS:-2}
VERSION=0.1.5
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

mkdir -p "$OUT"
SRC="$OUT/ik_llama_cpp_python-$VERSION/vendor/ik_llama.cpp"
if [ ! -f "$SRC/CMakeLists.txt" ]; then
    "$PYTHON" -m pip download --no-deps --no-binary :all: "ik-llama-cpp-python==$VERSION" -d "$OUT/dl"
    tar -xzf "$OUT/dl/ik_llama_cpp_python-$VERSION.tar.gz" -C "$OUT"
fi
if [ ! -f "$SRC/src/llama.cpp" ]; then
    echo "the sdist does not contain the ik_llama.cpp sources (expected $SRC)" >&2
    exit 1
fi
echo "ik_llama.cpp source: $SRC"

# The sdist leaves out common/cmake/build-info-gen-cpp.cmake, which the `common` library's build runs to write
# common/build-info.cpp; stand in with a script that fills build-info.cpp.in with the identified commit.
GEN="$SRC/common/cmake/build-info-gen-cpp.cmake"
if [ ! -f "$GEN" ]; then
    mkdir -p "$(dirname "$GEN")"
    cat > "$GEN" <<'CMAKE'
set(BUILD_NUMBER 0)
set(BUILD_COMMIT "55d3c05bf7b377deaa5dc84d255d9740a345a206")
set(BUILD_COMPILER "${CMAKE_C_COMPILER_ID} ${CMAKE_C_COMPILER_VERSION}")
set(BUILD_TARGET "cpu")
configure_file("${CMAKE_CURRENT_LIST_DIR}/../build-info.cpp.in" "${CMAKE_CURRENT_LIST_DIR}/../build-info.cpp")
CMAKE
fi

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    # CPU only; shared libraries so that ikkv can stand in for ggml_backend_buffer_clear (see ikkv.cpp).
    # GGML_IQK_FA_ALL_QUANTS=OFF only drops the CPU flash-attention kernels for q4_0/q4_1/iq4_nl caches
    # (ggml/src/iqk, a large part of the compile time); no allocation depends on it.
    cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=ON \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DGGML_CUDA=OFF -DGGML_IQK_FA_ALL_QUANTS=OFF
fi
cmake --build "$BUILD" -j "$JOBS" --target llama common

LIBDIRS=$(find "$BUILD" \( -name 'libllama.so' -o -name 'libggml*.so' -o -name 'libcommon.a' \) -printf '%h\n' | sort -u)
LFLAGS=()
for d in $LIBDIRS; do LFLAGS+=("-L$d" "-Wl,-rpath,$d"); done
mkdir -p "$BUILD/bin"
g++ -std=c++17 -O2 -o "$BUILD/bin/ikkv" "$HERE/ikkv.cpp" \
    -I"$SRC/include" -I"$SRC/ggml/include" -I"$SRC/common" -I"$SRC/src" \
    "${LFLAGS[@]}" -lcommon -lllama -lggml -fopenmp -pthread

echo "built: $BUILD/bin/ikkv"
