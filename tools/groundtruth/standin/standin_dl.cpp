// libggml-standin.so: the device-shaped stand-ins (standin.cpp) as a dynamically loaded ggml backend, so that an
// unmodified llama.cpp program sizes its buffers on them:
//
//   GGML_BACKEND_PATH=BUILD/bin/libggml-standin.so FITPLAN_STANDIN=cuda:24GiB llama-server -dev CUDA0 ...
//
// ggml_backend_load_all() loads the library named by GGML_BACKEND_PATH (ggml-backend-reg.cpp) and registers what
// its ggml_backend_init returns; llama-server calls it when it parses `-dev` (common/arg.cpp parse_device_list).
// The devices are those of FITPLAN_STANDIN (the syntax of `membreak --standin`). No kernel runs: the program
// must not compute on them (llama-server: --no-warmup, no requests). At exit the library prints every device
// buffer it allocated to stderr ("standin: alloc CUDA0 <bytes>"), the weights, caches and compute buffers in bytes.

#include "standin.h"

#include "ggml-backend-impl.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

ggml_backend_reg_t g_reg = nullptr;

struct report_at_exit {
    ~report_at_exit() {
        if (!g_reg) {
            return;
        }
        std::string all = standin_allocations();
        size_t p = 0;
        while (p < all.size()) {
            size_t nl = all.find('\n', p);
            fprintf(stderr, "standin: alloc %s\n", all.substr(p, nl - p).c_str());
            p = nl == std::string::npos ? all.size() : nl + 1;
        }
    }
} g_report;

}  // namespace

extern "C" __attribute__((visibility("default"))) ggml_backend_reg_t ggml_backend_init(void) {
    // ggml_backend_load_all() may run more than once: the same registry every time (ggml keeps one per pointer)
    if (g_reg) {
        return g_reg;
    }
    const char * spec = getenv("FITPLAN_STANDIN");
    if (!spec) {
        fprintf(stderr, "standin: FITPLAN_STANDIN is not set (e.g. cuda:24GiB)\n");
        return nullptr;
    }
    const std::string err = standin_create(spec, &g_reg);
    if (!err.empty()) {
        fprintf(stderr, "%s\n", err.c_str());
        return nullptr;
    }
    fprintf(stderr, "standin: %s", standin_describe().c_str());
    return g_reg;
}
