#!/usr/bin/env bash
# Print ik_llama.cpp's graph-allocator peaks for one ikkv run: every time the compute buffer grows, the list of
# tensors allocated at that moment with their offsets and sizes (ggml-alloc.c's GGML_ALLOCATOR_DEBUG output).
#
# Usage: tools/groundtruth/ik/alloc_debug.sh SRC BUILD MODEL [ikkv args...]
#
#   SRC    the ik_llama.cpp tree build_ik.sh unpacked (OUT_DIR/ik_llama_cpp_python-0.1.5/vendor/ik_llama.cpp)
#   BUILD  its build dir (has bin/ikkv)
#   MODEL  a model file (record_ik.py's --work dir holds the sparse ones)
#
# ggml-alloc.c is compiled on its own with GGML_ALLOCATOR_DEBUG into a small shared library that is preloaded in
# front of libggml.so: its exported ggml_gallocr_* functions take the place of the library's, nothing else changes.
# The last "max_size" line is the peak the compute buffer is sized for (the offsets, not only the listed
# tensors, decide it: freed space below the last allocation counts).
#
# Example: alloc_debug.sh $SRC $BUILD /tmp/ik-gt/deepseek-v2-lite.gguf -c 32768 -mla 3 -fa on -amb 128
set -euo pipefail
if [ $# -lt 3 ]; then
    sed -n '2,16p' "$0"
    exit 2
fi
SRC=$(realpath "$1")
BUILD=$(realpath "$2")
MODEL=$3
shift 3
LIB=$(mktemp -d)/libgalloc_debug.so
gcc -O1 -fPIC -shared -DGGML_ALLOCATOR_DEBUG -I"$SRC/ggml/src" -I"$SRC/ggml/include" -o "$LIB" \
    "$SRC/ggml/src/ggml-alloc.c"
LD_PRELOAD="$LIB" "$BUILD/bin/ikkv" -m "$MODEL" -t 2 "$@" 2>&1 >/dev/null | grep -E "max_size|compute buffer" \
    | sed 's/) /)\n    /g'
