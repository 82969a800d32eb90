// realload: load a model for real, run one prompt of one micro-batch and a few decode steps, and stop at each
// phase so that the driver (record_cuda.py) can read the process's memory from outside (NVML on a GPU, /proc on
// the CPU). Then print llama.cpp's memory breakdown, in bytes, as JSON (the same fields as membreak.cpp).
//
// Usage:
//   realload [--server-defaults] [--prompt N] [--decode K] -m MODEL [llama-server arguments...]
//
// Protocol: at each phase the program prints "PHASE <name>" on stdout and waits for one line on stdin.
// Phases: start (nothing initialised), init (backends initialised), model (weights loaded), context (KV cache and
// compute buffers allocated), prompt (after one llama_decode of N tokens; N defaults to n_ubatch, so one
// micro-batch), decode (after K single-token decodes). Then one JSON line follows on stdout.
//
// --server-defaults: as in membreak.cpp (-np unset becomes 4 slots with a unified KV cache, n_outputs_max from
// common_speculative_get_output_limits). The token ids are arbitrary (i * 7 + 1 modulo the vocabulary): the
// weights of a sparse model read as zeros, which is fine for memory.

#include "arg.h"
#include "common.h"
#include "speculative.h"
#include "llama.h"
#include "llama-ext.h"
#include "ggml-backend.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../log_capture.h"

static void phase(const char * name) {
    printf("PHASE %s\n", name);
    fflush(stdout);
    char buf[64];
    if (fgets(buf, sizeof(buf), stdin) == nullptr) {
        fprintf(stderr, "realload: driver went away at phase %s\n", name);
        exit(5);
    }
}

static void dump_log_to_stderr() {
    for (const auto & l : g_log_lines) {
        fprintf(stderr, "%s\n", l.c_str());
    }
}

static std::string breakdown_json(const llama_context * ctx) {
    const llama_memory_breakdown mb = llama_get_memory_breakdown(ctx);
    std::string out = "[";
    bool first = true;
    for (const auto & [buft, d] : mb) {
        if (!first) {
            out += ",";
        }
        first = false;
        ggml_backend_dev_t dev = ggml_backend_buft_get_device(buft);
        out += "{\"buffer_type\":" + json_str(ggml_backend_buft_name(buft));
        out += ",\"device\":" + (dev ? json_str(ggml_backend_dev_name(dev)) : std::string("null"));
        out += ",\"is_host\":" + std::string(ggml_backend_buft_is_host(buft) ? "true" : "false");
        out += ",\"model\":" + std::to_string(d.model);
        out += ",\"context\":" + std::to_string(d.context);
        out += ",\"compute\":" + std::to_string(d.compute);
        out += "}";
    }
    return out + "]";
}

static std::string resolved_json(const llama_context * ctx, const llama_model * model,
                                 const llama_context_params & cparams, const llama_model_params & mparams) {
    std::string out = "{";
    out += "\"n_ctx\":" + std::to_string(llama_n_ctx(ctx));
    out += ",\"n_ctx_seq\":" + std::to_string(llama_n_ctx_seq(ctx));
    out += ",\"n_seq_max\":" + std::to_string(llama_n_seq_max(ctx));
    out += ",\"n_batch\":" + std::to_string(llama_n_batch(ctx));
    out += ",\"n_ubatch\":" + std::to_string(llama_n_ubatch(ctx));
    out += ",\"n_outputs_max_param\":" + std::to_string(cparams.n_outputs_max);
    out += ",\"n_outputs_max_per_seq_param\":" + std::to_string(cparams.n_outputs_max_per_seq);
    out += ",\"kv_unified\":" + std::string(cparams.kv_unified ? "true" : "false");
    out += ",\"swa_full\":" + std::string(cparams.swa_full ? "true" : "false");
    out += ",\"flash_attn_type\":" + json_str(llama_flash_attn_type_name(cparams.flash_attn_type));
    out += ",\"type_k\":" + json_str(ggml_type_name(cparams.type_k));
    out += ",\"type_v\":" + json_str(ggml_type_name(cparams.type_v));
    out += ",\"n_gpu_layers_param\":" + std::to_string(mparams.n_gpu_layers);
    out += ",\"n_layer\":" + std::to_string(llama_model_n_layer(model));
    out += ",\"n_ctx_train\":" + std::to_string(llama_model_n_ctx_train(model));
    out += ",\"n_vocab\":" + std::to_string(llama_vocab_n_tokens(llama_model_get_vocab(model)));
    out += ",\"n_expert\":" + std::to_string(llama_model_n_expert(model));
    out += ",\"model_size\":" + std::to_string(llama_model_size(model));
    out += ",\"model_n_params\":" + std::to_string(llama_model_n_params(model));
    return out + "}";
}

static std::string devices_json(const llama_model * model) {
    std::string out = "[";
    const int nd = llama_model_n_devices(model);
    for (int i = 0; i < nd; i++) {
        ggml_backend_dev_t dev = llama_model_get_device(model, i);
        size_t free = 0;
        size_t total = 0;
        ggml_backend_dev_memory(dev, &free, &total);
        out += std::string(i > 0 ? "," : "") + "{\"name\":" + json_str(ggml_backend_dev_name(dev));
        out += ",\"description\":" + json_str(ggml_backend_dev_description(dev));
        out += ",\"type\":" + json_str(ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_GPU ? "gpu" : "other");
        out += ",\"free_at_end\":" + std::to_string(free) + ",\"total\":" + std::to_string(total) + "}";
    }
    return out + "]";
}

int main(int argc, char ** argv) {
    bool server_defaults = false;
    int  n_prompt        = 0;  // 0: n_ubatch
    int  n_decode        = 4;
    std::vector<char *> args;
    args.push_back(argv[0]);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--server-defaults") == 0) {
            server_defaults = true;
        } else if (strcmp(argv[i], "--prompt") == 0 && i + 1 < argc) {
            n_prompt = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--decode") == 0 && i + 1 < argc) {
            n_decode = atoi(argv[++i]);
        } else {
            args.push_back(argv[i]);
        }
    }

    common_params params;
    if (!common_params_parse((int) args.size(), args.data(), params, LLAMA_EXAMPLE_SERVER)) {
        fprintf(stderr, "realload: failed to parse arguments\n");
        return 2;
    }
    if (server_defaults) {
        if (params.n_parallel < 0) {
            params.n_parallel = 4;
            params.kv_unified = true;
        }
        const auto lim = common_speculative_get_output_limits(
            params.n_batch, params.n_parallel, common_speculative_n_max(&params.speculative));
        params.n_outputs_max         = lim.total   > 1 ? lim.total   : 1;
        params.n_outputs_max_per_seq = lim.per_seq > 1 ? lim.per_seq : 1;
    } else if (params.n_parallel < 0) {
        params.n_parallel = 1;
    }

    phase("start");
    llama_backend_init();
    llama_log_set(capture_log, nullptr);
    phase("init");

    llama_model_params   mparams = common_model_params_to_llama(params);
    llama_context_params cparams = common_context_params_to_llama(params);
    const int64_t t_load = ggml_time_us();
    llama_model * model = llama_model_load_from_file(params.model.path.c_str(), mparams);
    if (model == nullptr) {
        dump_log_to_stderr();
        fprintf(stderr, "realload: failed to load model\n");
        return 3;
    }
    const int64_t t_model = ggml_time_us();
    phase("model");

    llama_context * ctx = llama_init_from_model(model, cparams);
    if (ctx == nullptr) {
        dump_log_to_stderr();
        fprintf(stderr, "realload: failed to create context\n");
        llama_model_free(model);
        return 4;
    }
    const int64_t t_ctx = ggml_time_us();
    phase("context");

    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    const int n_ubatch = (int) llama_n_ubatch(ctx);
    const int room = (int) llama_n_ctx_seq(ctx) - n_decode - 1;
    int n = n_prompt > 0 ? n_prompt : n_ubatch;
    n = n > n_ubatch ? n_ubatch : n;
    n = n > room ? room : n;
    std::vector<llama_token> tokens(n > 0 ? n : 1);
    for (int i = 0; i < (int) tokens.size(); i++) {
        tokens[i] = (llama_token) ((i * 7 + 1) % n_vocab);
    }
    const int64_t t_p0 = ggml_time_us();
    const int rc_prompt = llama_decode(ctx, llama_batch_get_one(tokens.data(), (int32_t) tokens.size()));
    llama_synchronize(ctx);
    const int64_t t_p1 = ggml_time_us();
    phase("prompt");

    int rc_decode = 0;
    for (int k = 0; k < n_decode && rc_decode == 0; k++) {
        llama_token tok = (llama_token) ((k * 13 + 2) % n_vocab);
        rc_decode = llama_decode(ctx, llama_batch_get_one(&tok, 1));
    }
    llama_synchronize(ctx);
    const int64_t t_d1 = ggml_time_us();
    phase("decode");

    std::string out = "{\"resolved\":" + resolved_json(ctx, model, cparams, mparams);
    out += ",\"devices\":" + devices_json(model);
    out += ",\"buffers\":" + breakdown_json(ctx);
    out += ",\"run\":{\"n_prompt\":" + std::to_string(tokens.size()) + ",\"n_decode\":" + std::to_string(n_decode);
    out += ",\"rc_prompt\":" + std::to_string(rc_prompt) + ",\"rc_decode\":" + std::to_string(rc_decode);
    out += ",\"load_ms\":" + std::to_string((t_model - t_load) / 1000);
    out += ",\"context_ms\":" + std::to_string((t_ctx - t_model) / 1000);
    out += ",\"prompt_ms\":" + std::to_string((t_p1 - t_p0) / 1000);
    out += ",\"decode_ms\":" + std::to_string((t_d1 - t_p1) / 1000) + "}";

    llama_free(ctx);
    llama_model_free(model);
    if (!g_log_pending.empty()) {
        g_log_lines.push_back(g_log_pending);
        g_log_pending.clear();
    }
    out += ",\"log\":[";
    for (size_t i = 0; i < g_log_lines.size(); i++) {
        out += (i > 0 ? "," : "") + json_str(g_log_lines[i]);
    }
    out += "]}";
    fputs(out.c_str(), stdout);
    fputs("\n", stdout);
    fflush(stdout);
    llama_backend_free();
    return 0;
}
