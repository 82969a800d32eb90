// ikkv: load a model with ik_llama.cpp, create a context from llama-server style arguments, report the KV cache
// ik_llama.cpp allocated (exact bytes per layer tensor) and every log line, as JSON on stdout after a line
// `@@IKKV-JSON@@` (ik prints some notices to stdout with plain printf), then exit.
//
// Build: tools/groundtruth/ik/build_ik.sh. Usage: ikkv -m MODEL.gguf -c 4096 -mla 3 -fa on -ctk q8_0 [...]
// (any argument of ik's common parser; the warmup decode is always disabled, nothing is evaluated).
//
// It reads ik_llama.cpp's own `llama_context::kv_self` (src/llama-context.h of the same build) to get
// ggml_nbytes of every cache tensor, so it must be compiled against the exact sources of the libraries.
//
// Two libc/ggml entry points are stood in for, so that the runs do not touch gigabytes of memory on a small shared
// machine. Neither changes a size:
// - mmap without MAP_POPULATE: the model is a sparse file, and ik maps weights with MAP_POPULATE, which would
//   read the whole (all-zero) file into the page cache;
// - ggml_backend_buffer_clear is a no-op unless IKKV_CLEAR=1: llama_kv_cache_init zero-fills the KV buffers it
//   has just allocated (gigabytes at -mla 0 and 32k context). The buffer sizes are logged before the clear.
#include "common.h"
#include "llama.h"
#include "llama-context.h"
#include "ggml.h"
#include "ggml-backend.h"

#include <dlfcn.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

extern "C" {

void * mmap(void * addr, size_t len, int prot, int flags, int fd, off_t off) {
    using fn_t = void * (*)(void *, size_t, int, int, int, off_t);
    static fn_t real = reinterpret_cast<fn_t>(dlsym(RTLD_NEXT, "mmap"));
    return real(addr, len, prot, flags & ~MAP_POPULATE, fd, off);
}

void * mmap64(void * addr, size_t len, int prot, int flags, int fd, off_t off) {
    using fn_t = void * (*)(void *, size_t, int, int, int, off_t);
    static fn_t real = reinterpret_cast<fn_t>(dlsym(RTLD_NEXT, "mmap64"));
    return real(addr, len, prot, flags & ~MAP_POPULATE, fd, off);
}

void ggml_backend_buffer_clear(ggml_backend_buffer_t buffer, uint8_t value) {
    const char * env = getenv("IKKV_CLEAR");
    if (env && env[0] == '1') {
        using fn_t = void (*)(ggml_backend_buffer_t, uint8_t);
        static fn_t real = reinterpret_cast<fn_t>(dlsym(RTLD_NEXT, "ggml_backend_buffer_clear"));
        real(buffer, value);
    }
}

}  // extern "C"

#include "../log_capture.h"

static void print_tensors(const char * key, const std::vector<ggml_tensor *> & ts) {
    printf("  \"%s\": [", key);
    bool first = true;
    for (size_t i = 0; i < ts.size(); ++i) {
        const ggml_tensor * t = ts[i];
        if (!t) continue;
        printf("%s\n    {\"layer\": %zu, \"name\": %s, \"type\": %s, \"ne\": [%lld, %lld, %lld, %lld], \"bytes\": %zu}",
               first ? "" : ",", i, json_str(t->name).c_str(), json_str(ggml_type_name(t->type)).c_str(),
               (long long) t->ne[0], (long long) t->ne[1], (long long) t->ne[2], (long long) t->ne[3], ggml_nbytes(t));
        first = false;
    }
    printf("%s],\n", first ? "" : "\n  ");
}

int main(int argc, char ** argv) {
    llama_log_set(capture_log, nullptr);
    gpt_params params;
    if (!gpt_params_parse(argc, argv, params)) {
        fprintf(stderr, "ikkv: could not parse the arguments\n");
        return 2;
    }
    params.warmup = false;

    llama_backend_init();
    llama_init_result init = llama_init_from_gpt_params(params);
    const bool ok = init.model != nullptr && init.context != nullptr;

    // ik prints some notices with plain printf; the JSON follows this marker line
    printf("\n@@IKKV-JSON@@\n{\n");
    printf("  \"ok\": %s,\n", ok ? "true" : "false");
    if (ok) {
        const llama_context * ctx = init.context;
        const llama_cparams & cp = ctx->cparams;
        printf("  \"resolved\": {\"n_ctx\": %u, \"n_batch\": %u, \"n_ubatch\": %u, \"n_seq_max\": %u, "
               "\"flash_attn\": %s, \"mla_attn\": %d, \"attn_max_batch\": %d, \"kv_size\": %u, "
               "\"type_k\": %s, \"type_v\": %s, \"v_trans\": %s},\n",
               cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max, cp.flash_attn ? "true" : "false", cp.mla_attn,
               cp.attn_max_batch, ctx->kv_self.size, json_str(ggml_type_name(ctx->kv_self.type_k)).c_str(),
               json_str(ggml_type_name(ctx->kv_self.type_v)).c_str(), ctx->kv_self.v_trans ? "true" : "false");
        print_tensors("k", ctx->kv_self.k_l);
        print_tensors("v", ctx->kv_self.v_l);
        size_t k_bytes = 0;
        size_t v_bytes = 0;
        for (auto * t : ctx->kv_self.k_l) k_bytes += t ? ggml_nbytes(t) : 0;
        for (auto * t : ctx->kv_self.v_l) v_bytes += t ? ggml_nbytes(t) : 0;
        printf("  \"k_bytes\": %zu,\n  \"v_bytes\": %zu,\n  \"kv_buffers\": [", k_bytes, v_bytes);
        for (size_t i = 0; i < ctx->kv_self.bufs.size(); ++i) {
            ggml_backend_buffer_t b = ctx->kv_self.bufs[i];
            printf("%s{\"name\": %s, \"bytes\": %zu}", i ? ", " : "", json_str(ggml_backend_buffer_name(b)).c_str(),
                   ggml_backend_buffer_get_size(b));
        }
        printf("],\n");
    }
    printf("  \"log\": [");
    for (size_t i = 0; i < g_log_lines.size(); ++i) {
        printf("%s\n    %s", i ? "," : "", json_str(g_log_lines[i]).c_str());
    }
    printf("\n  ]\n}\n");
    fflush(stdout);
    // exit without freeing: nothing more to measure
    _Exit(ok ? 0 : 1);
}
