// The projector's compute buffer after one image of a given size (beyond the warm-up image): load a projector on the
// CPU with warm-up on (clip reserves the warm-up image's graph), print that buffer, then encode one preprocessed image
// of WIDTH x HEIGHT pixels per pair of arguments and print the compute buffer after it (ggml_backend_sched grows its
// buffer to the larger graph before computing). The evaluation callback stops the computation after the graph's
// first node: the allocation is llama.cpp's own, the arithmetic (minutes on a CPU) is skipped.
// Usage: mmproj_image MMPROJ.gguf FLASH_ATTN(-1 auto, 0 off, 1 on) IMAGE_MAX_TOKENS(-1 = default) W H [W H ...]
// Built against the same llama.cpp build as mmproj_warmup (see README.md, "Projector images beyond the warm-up").
#include "clip.h"
#include "clip-impl.h"
#include "ggml-backend.h"
#include <cstdio>
#include <cstdlib>
#include <vector>

static size_t g_buffer = 0;
static bool g_first = true;

static bool stop_after_first(ggml_tensor * t, bool ask, void *) {
    if (ask) {
        return g_first;  // observe the first node only
    }
    g_buffer = t->buffer ? ggml_backend_buffer_get_size(t->buffer) : 0;
    g_first = false;
    return false;  // stop: the graph is allocated, its arithmetic is not needed
}

int main(int argc, char ** argv) {
    if (argc < 6 || (argc - 4) % 2 != 0) {
        fprintf(stderr, "usage: %s MMPROJ.gguf FA IMAGE_MAX_TOKENS W H [W H ...]\n", argv[0]);
        return 2;
    }
    clip_context_params p{};
    p.use_gpu = false;
    p.device = nullptr;
    p.flash_attn_type = (clip_flash_attn_type) atoi(argv[2]);
    p.image_min_tokens = -1;
    p.image_max_tokens = atoi(argv[3]);
    p.warmup = true;
    p.cb_eval = stop_after_first;
    p.cb_eval_user_data = nullptr;
    p.no_alloc = false;
    clip_init_result r = clip_init(argv[1], p);
    if (!r.ctx_v) {
        return 1;
    }
    size_t warm = 0;
    for (auto & [dev, size] : clip_get_mem_usage(r.ctx_v)) {
        if (ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU) {
            warm += size;
        }
    }
    printf("model+warmup_bytes %zu\n", warm);
    for (int i = 4; i + 1 < argc; i += 2) {
        clip_image_f32 img;
        img.set_size({atoi(argv[i]), atoi(argv[i + 1])}, false, false);
        std::vector<float> out;
        g_first = true;
        g_buffer = 0;
        bool ok = clip_image_encode(r.ctx_v, 1, &img, out);
        printf("image %s x %s ok=%d compute_bytes %zu\n", argv[i], argv[i + 1], (int) ok, g_buffer);
        fflush(stdout);
    }
    clip_free(r.ctx_v);
    return 0;
}
