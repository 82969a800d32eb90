// Dry run of a multimodal projector: load it with warm-up on (the compute-buffer reserve) on the CPU and print every
// log line, including clip's compute buffer size. Usage: mmproj_warmup TEXT_MODEL.gguf MMPROJ.gguf [flash_attn_type]
// (0 = off). Built against the same llama.cpp build as membreak (see README.md, "Projector warm-up").
#include "llama.h"
#include "mtmd.h"
#include <cstdio>
#include <cstring>
static void cb(enum ggml_log_level, const char * text, void *) { fputs(text, stdout); }
int main(int argc, char ** argv) {
    llama_log_set(cb, nullptr);
    mtmd_log_set(cb, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * m = llama_model_load_from_file(argv[1], mp);
    if (!m) return 1;
    mtmd_context_params p = mtmd_context_params_default();
    p.use_gpu = false;
    p.n_threads = 1;
    p.warmup = true;
    if (argc > 3) p.flash_attn_type = (llama_flash_attn_type) atoi(argv[3]);
    mtmd_context * c = mtmd_init_from_file(argv[2], m, p);
    printf("\nctx=%p\n", (void*)c);
    return 0;
}
