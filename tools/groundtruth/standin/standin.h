// A device-shaped stand-in: a ggml backend that answers llama.cpp's scheduler and allocator the way a GPU backend
// does (buffer types, alignment, allocation sizes, supported and offloaded ops, pinned host buffers, events), but
// runs no kernel and holds no device memory. Registered before the model is loaded, it lets a dry run
// (no_alloc = true) size every buffer exactly as llama.cpp would on that device, on a machine without it.
//
// The rules are copied from the llama.cpp sources of commit 515e85511 (build 11434); each function in standin.cpp
// names the file and function it mirrors.
#pragma once

#include <string>

#include "ggml-backend.h"

// Parse a device list such as "cuda:24GiB:cc=89,cuda:24GiB:cc=89" and register a backend with those devices
// (one kind per run). Kinds: cuda (cc = compute capability x10, default 89), rocm (arch = gfx1100 | gfx942 | gfx90a |
// gfx1201 | gfx1030), vulkan (align = minStorageBufferOffsetAlignment, default 64; maxalloc =
// maxMemoryAllocationSize, default 4GiB; maxbuf = maxBufferSize; maxrange = maxStorageBufferRange, default 4GiB-1;
// mapalign = minMemoryMapAlignment, default 64; idx64=1 for 64-bit shader indexing), metal (one device, unified
// memory; maxbuf = maxBufferLength, default the device size). Returns an empty string on success, else the reason.
std::string standin_register(const std::string & spec);

// The same, without registering: the registry is returned in *out (for a dynamically loaded backend, standin_dl.cpp,
// which ggml registers itself).
std::string standin_create(const std::string & spec, ggml_backend_reg_t * out);

// One line per registered device describing the rules it answers with (for the recording's provenance).
std::string standin_describe();

// One "<buffer type> <bytes>" line per device buffer allocated so far (weights, caches, compute), in order.
std::string standin_allocations();
