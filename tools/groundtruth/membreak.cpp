// membreak: print llama.cpp's memory breakdown for a dry run, in bytes, as JSON.
//
// It parses the same command-line arguments as llama-server (common_params_parse with LLAMA_EXAMPLE_SERVER),
// converts them with common_model_params_to_llama / common_context_params_to_llama, and then does what
// common/fit.cpp:common_get_device_memory_data_impl does: load the model with no_alloc = true and
// load_mode = LLAMA_LOAD_MODE_NONE, create a context, and read llama_get_memory_breakdown().
// --fit is never run: the parameters are measured exactly as given.
//
// Usage:
//   membreak [--server-defaults] -m MODEL [llama-server arguments...]
//
// --server-defaults applies what tools/server/server.cpp and server-context.cpp do before loading:
// n_parallel = -1 (auto) becomes 4 with a unified KV cache, and n_outputs_max / n_outputs_max_per_seq come from
// common_speculative_get_output_limits(n_batch, n_parallel, n_draft). Without it, n_parallel = -1 becomes 1 and
// n_outputs_max stays at its default (0 = n_batch), which is what llama-fit-params does.
//
// Output (stdout, one JSON object): resolved context parameters, the model devices, one entry per buffer type
// of the breakdown (model/context/compute bytes), and the library's log lines (captured synchronously, so none
// are lost) for the per-cache KV / RS / output buffer lines.

#include "arg.h"
#include "common.h"
#include "speculative.h"
#include "llama.h"
#include "llama-ext.h"
#include "ggml-backend.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "log_capture.h"
#ifdef MEMBREAK_STANDIN
#include "standin/standin.h"
#endif

static const char * dev_type_name(enum ggml_backend_dev_type t) {
    switch (t) {
        case GGML_BACKEND_DEVICE_TYPE_CPU:   return "cpu";
        case GGML_BACKEND_DEVICE_TYPE_GPU:   return "gpu";
        case GGML_BACKEND_DEVICE_TYPE_IGPU:  return "igpu";
        case GGML_BACKEND_DEVICE_TYPE_ACCEL: return "accel";
        default:                             return "other";
    }
}

int main(int argc, char ** argv) {
    bool server_defaults = false;
    std::string standin_spec;
    std::vector<char *> args;
    args.push_back(argv[0]);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--server-defaults") == 0) {
            server_defaults = true;
        } else if (strcmp(argv[i], "--standin") == 0 && i + 1 < argc) {
            standin_spec = argv[++i];
        } else {
            args.push_back(argv[i]);
        }
    }

    common_params params;
    if (!common_params_parse((int) args.size(), args.data(), params, LLAMA_EXAMPLE_SERVER)) {
        fprintf(stderr, "membreak: failed to parse arguments\n");
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

    llama_backend_init();
    llama_log_set(capture_log, nullptr);
    if (!standin_spec.empty()) {
#ifdef MEMBREAK_STANDIN
        // device-shaped stand-ins (standin/standin.cpp): registered before the model picks its devices
        const std::string err = standin_register(standin_spec);
        if (!err.empty()) {
            fprintf(stderr, "%s\n", err.c_str());
            return 2;
        }
#else
        fprintf(stderr, "membreak: built without the stand-in devices\n");
        return 2;
#endif
    }

    llama_model_params   mparams = common_model_params_to_llama(params);
    llama_context_params cparams = common_context_params_to_llama(params);
    mparams.no_alloc  = true;
    mparams.load_mode = LLAMA_LOAD_MODE_NONE;

    llama_model * model = llama_model_load_from_file(params.model.path.c_str(), mparams);
    if (model == nullptr) {
        fflush(stderr);
        for (const auto & l : g_log_lines) {
            fprintf(stderr, "%s\n", l.c_str());
        }
        fprintf(stderr, "membreak: failed to load model\n");
        return 3;
    }
    llama_context * ctx = llama_init_from_model(model, cparams);
    if (ctx == nullptr) {
        for (const auto & l : g_log_lines) {
            fprintf(stderr, "%s\n", l.c_str());
        }
        fprintf(stderr, "membreak: failed to create context\n");
        llama_model_free(model);
        return 4;
    }

    const llama_memory_breakdown mb = llama_get_memory_breakdown(ctx);

    std::string out = "{";
    out += "\"resolved\":{";
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
    out += "}";

    out += ",\"devices\":[";
    const int nd = llama_model_n_devices(model);
    for (int i = 0; i < nd; i++) {
        ggml_backend_dev_t dev = llama_model_get_device(model, i);
        if (i > 0) {
            out += ",";
        }
        out += "{\"name\":" + json_str(ggml_backend_dev_name(dev));
        out += ",\"description\":" + json_str(ggml_backend_dev_description(dev));
        out += ",\"type\":" + json_str(dev_type_name(ggml_backend_dev_type(dev)));
        out += "}";
    }
    out += "]";

    out += ",\"buffers\":[";
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
    out += "]";

    llama_free(ctx);
    llama_model_free(model);
    if (!g_log_pending.empty()) {
        g_log_lines.push_back(g_log_pending);
        g_log_pending.clear();
    }

#ifdef MEMBREAK_STANDIN
    out += ",\"standin\":" + json_str(standin_describe());
#endif
    out += ",\"log\":[";
    for (size_t i = 0; i < g_log_lines.size(); i++) {
        if (i > 0) {
            out += ",";
        }
        out += json_str(g_log_lines[i]);
    }
    out += "]}";

    fputs(out.c_str(), stdout);
    fputs("\n", stdout);
    fflush(stdout);
    llama_backend_free();
    return 0;
}
