// The device-shaped stand-in (see standin.h). Every rule cites the llama.cpp 515e85511 source it mirrors.
//
// What it reproduces of ggml-cuda (and ggml-cuda built for HIP, "rocm"):
//   - the device buffer type "CUDA<n>": alignment 128 (ggml-cuda.cu ggml_backend_cuda_buffer_type_get_alignment),
//     no size limit (get_max_size NULL), get_alloc_size = ggml_nbytes, plus the padding of the last row of a
//     quantized matrix to MATRIX_ROW_PADDING = 512 elements (ggml_backend_cuda_buffer_type_get_alloc_size,
//     common.cuh MATRIX_ROW_PADDING), plus for FLASH_ATTN_EXT the f16 copies of K and V the chosen kernel needs
//     (fattn.cu ggml_cuda_flash_attn_ext_get_alloc_size, fattn-common.cuh
//     ggml_cuda_flash_attn_ext_get_f16_extra_data, kernel choice fattn.cu ggml_cuda_get_best_fattn_kernel);
//   - the pinned host buffer type "CUDA_Host": the CPU buffer type's alignment and sizes, is_host
//     (ggml-cuda.cu ggml_backend_cuda_host_buffer_type);
//   - supports_op: a source in another device's buffer is refused (ggml_backend_cuda_device_supports_op, first
//     loop); MUL_MAT / MUL_MAT_ID with the type and stride rules of that function; FLASH_ATTN_EXT only where a
//     kernel exists (ggml_cuda_flash_attn_ext_supported); every other op is taken as supported (the recorded
//     models use none that ggml-cuda refuses at this commit);
//   - offload_op: an op whose weight sits in host memory is offloaded from a batch of 32
//     (ggml_backend_cuda_device_offload_op, get_op_batch_size; GGML_OP_OFFLOAD_MIN_BATCH default 32);
//   - device props: type GPU, async, host buffer, events, no buffer_from_host_ptr
//     (ggml_backend_cuda_device_get_props), so llama.cpp turns pipeline parallelism on across several devices.
// What it does not reproduce: the alloc dependencies ggml_backend_cuda_graph_optimize adds for fused MoE routing
// and shared experts (they extend the life of small routing tensors), and the row-split buffer type (-sm row).

#include "standin.h"

#include "ggml-backend-impl.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

enum class kind { cuda, rocm };

struct device_rules {
    kind        k;
    int         cc;        // ggml-cuda's compute capability number (NVIDIA: major*100 + minor*10; AMD: offset + gfx id)
    size_t      total;     // bytes the device reports
    std::string name;      // CUDA0, ROCm0 ...
    std::string desc;
    std::string arch;      // as given
};

// common.cuh
constexpr int CC_VOLTA          = 700;
constexpr int CC_TURING         = 750;
constexpr int CC_ADA_LOVELACE   = 890;
constexpr int CC_OFFSET_AMD     = 0x1000000;
constexpr int CC_OFFSET_MTHREADS = 0x0100000;
constexpr int CC_CDNA1          = CC_OFFSET_AMD + 0x908;
constexpr int CC_RDNA1          = CC_OFFSET_AMD + 0x1010;
constexpr int CC_RDNA3          = CC_OFFSET_AMD + 0x1100;
constexpr int FATTN_KQ_STRIDE   = 256;   // fattn-common.cuh
constexpr int MATRIX_ROW_PADDING = 512;  // common.cuh

bool cc_is_nvidia(int cc) { return cc < CC_OFFSET_MTHREADS; }
bool turing_mma_available(int cc) { return cc_is_nvidia(cc) && cc >= CC_TURING; }
bool volta_mma_available(int cc) { return cc_is_nvidia(cc) && cc == CC_VOLTA; }
bool amd_mfma_available(int cc) { return cc >= CC_CDNA1 && cc < CC_RDNA1; }
bool amd_wmma_available(int cc) { return cc >= CC_RDNA3; }

struct standin_device_ctx {
    device_rules                     rules;
    ggml_backend_buffer_type         buft;
    int                              index;
};

struct standin_reg_ctx {
    std::vector<ggml_backend_device> devices;
    std::vector<std::unique_ptr<standin_device_ctx>> ctxs;
    std::string                      name;
};

std::vector<std::unique_ptr<standin_reg_ctx>> g_regs;
std::vector<std::unique_ptr<ggml_backend_reg>> g_reg_objs;
std::string g_describe;

bool is_standin_buft(ggml_backend_buffer_type_t buft);

// ---- FLASH_ATTN_EXT: which kernel ggml-cuda picks (fattn.cu ggml_cuda_get_best_fattn_kernel) ----

enum fattn_kernel { FA_NONE = 0, FA_VEC = 100, FA_TILE = 200, FA_MMA = 400 };

bool fattn_kv_type_supported(ggml_type t) {  // fattn.cu ggml_cuda_fattn_kv_type_supported
    switch (t) {
        case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1:
        case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_Q8_0:
            return true;
        default:
            return false;
    }
}

bool fattn_vec_case_exists(int64_t d, ggml_type k, ggml_type v) {  // fattn.cu ggml_cuda_get_fattn_vec_case
    if (d != 64 && d != 128 && d != 256) {
        return false;
    }
    auto ok = [](ggml_type t) {
        return t == GGML_TYPE_F16 || t == GGML_TYPE_F32 || t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1 ||
               t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q5_1 || t == GGML_TYPE_Q8_0 || t == GGML_TYPE_BF16;
    };
    return ok(k) && ok(v);
}

fattn_kernel best_fattn_kernel(int cc, const ggml_tensor * dst) {
    const ggml_tensor * Q    = dst->src[0];
    const ggml_tensor * K    = dst->src[1];
    const ggml_tensor * V    = dst->src[2];
    const ggml_tensor * mask = dst->src[3];

    const int gqa_ratio = (int) (Q->ne[2] / K->ne[2]);
    float max_bias = 0.0f;
    memcpy(&max_bias, (const float *) dst->op_params + 1, sizeof(float));

    bool gqa_opt_applies = gqa_ratio >= 2 && mask && max_bias == 0.0f && K->ne[1] % FATTN_KQ_STRIDE == 0;
    for (const ggml_tensor * t : {Q, K, V, mask}) {
        if (t == nullptr || ggml_is_quantized(t->type)) {
            continue;
        }
        for (size_t i = 1; i < GGML_MAX_DIMS; ++i) {
            if (t->nb[i] % 16 != 0) {
                gqa_opt_applies = false;
                break;
            }
        }
    }

    switch (K->ne[0]) {
        case 40: case 64: case 72: case 80: case 96: case 128: case 112: case 256:
            if (V->ne[0] != K->ne[0]) return FA_NONE;
            break;
        case 192:
            if (V->ne[0] != 128 || !gqa_opt_applies || gqa_ratio % 8 != 0) return FA_NONE;
            break;
        case 320:
            if (V->ne[0] != 256 || !gqa_opt_applies || gqa_ratio % 32 != 0) return FA_NONE;
            break;
        case 512:
            if (V->ne[0] != K->ne[0] || !gqa_opt_applies) return FA_NONE;
            break;
        case 576:
            if (V->ne[0] != 512 || !gqa_opt_applies) return FA_NONE;
            break;
        default:
            return FA_NONE;
    }
    if (!fattn_kv_type_supported(K->type) || !fattn_kv_type_supported(V->type)) return FA_NONE;
    if (mask && mask->ne[2] != 1) return FA_NONE;

    const bool can_use_vector_kernel = Q->ne[0] <= 256 && Q->ne[0] % 64 == 0 && Q->ne[0] != 192 &&
                                       K->ne[1] % FATTN_KQ_STRIDE == 0;
    const bool quant_kv = ggml_is_quantized(K->type) || ggml_is_quantized(V->type);

    if (turing_mma_available(cc) && Q->ne[0] != 40 && Q->ne[0] != 72) {
        if (can_use_vector_kernel) {
            if (!quant_kv) {
                // The sparse-decode gather (ggml_cuda_flash_attn_ext_mma_f16_shall_use_sparse) only moves a
                // one-token f16 decode between VEC and MMA: no f16 copy either way, so it is not ported.
                if (cc >= CC_ADA_LOVELACE && Q->ne[1] == 1 && Q->ne[3] == 1 &&
                    !(gqa_ratio > 4 && (Q->ne[0] >= 256 || K->ne[1] >= 8192))) {
                    return FA_VEC;
                }
            } else if (cc >= CC_ADA_LOVELACE) {
                if (Q->ne[1] <= 2) return FA_VEC;
            } else if (Q->ne[1] == 1) {
                return FA_VEC;
            }
            if (!gqa_opt_applies && Q->ne[1] == 1) return FA_VEC;
        }
        return FA_MMA;
    }

    const int ncols2_max = Q->ne[0] == 320 ? 32 : ((Q->ne[0] == 576 || Q->ne[0] == 192) ? 16 : 8);
    int gqa_ratio_eff = 1;
    while (max_bias == 0.0f && gqa_ratio % (2 * gqa_ratio_eff) == 0 && gqa_ratio_eff < ncols2_max) {
        gqa_ratio_eff *= 2;
    }
    if (volta_mma_available(cc) && Q->ne[0] != 40 && Q->ne[0] != 72) {
        if (can_use_vector_kernel && Q->ne[1] * gqa_ratio_eff <= 2) return FA_VEC;
        if (Q->ne[1] * gqa_ratio_eff <= 16) return FA_TILE;
        return FA_MMA;
    }
    if (amd_mfma_available(cc) && Q->ne[0] != 40 && Q->ne[0] != 72) {
        if (Q->ne[0] <= 64 && Q->ne[1] * gqa_ratio_eff > 8) return FA_MMA;
        if (Q->ne[0] <= 128 && Q->ne[1] * gqa_ratio_eff > 16) return FA_MMA;
        if (Q->ne[0] <= 256 && Q->ne[1] * gqa_ratio_eff > 64) return FA_MMA;
        if (Q->ne[0] > 256 && gqa_opt_applies && Q->ne[1] * gqa_ratio_eff > 128) return FA_MMA;
    }
    if (amd_wmma_available(cc) && gqa_opt_applies && Q->ne[0] <= 256 && Q->ne[0] != 40 && Q->ne[0] != 72 &&
        Q->ne[1] * gqa_ratio_eff > (Q->ne[0] <= 128 ? 8 : 16)) {
        return FA_MMA;
    }
    if (can_use_vector_kernel) {
        if (!quant_kv) {
            if (Q->ne[1] == 1 && !gqa_opt_applies) return FA_VEC;
        } else if (Q->ne[1] <= 2) {
            return FA_VEC;
        }
    }
    return FA_TILE;
}

// fattn.cu ggml_cuda_flash_attn_ext_get_alloc_size + fattn-common.cuh ggml_cuda_flash_attn_ext_get_f16_extra_data,
// with dst->data taken as 0 (ggml-alloc asks before the tensor has an address; the result is a size).
size_t fattn_alloc_size(int cc, const ggml_tensor * dst) {
    const ggml_tensor * Q = dst->src[0];
    const ggml_tensor * K = dst->src[1];
    const ggml_tensor * V = dst->src[2];
    bool need_f16_K = false;
    bool need_f16_V = false;
    switch (best_fattn_kernel(cc, dst)) {
        case FA_TILE:
        case FA_MMA:
            need_f16_K = need_f16_V = true;
            break;
        case FA_VEC: {
            const bool fallback = !fattn_vec_case_exists(Q->ne[0], K->type, V->type);
            need_f16_K = K->type == GGML_TYPE_F32 || fallback;
            need_f16_V = V->type == GGML_TYPE_F32 || fallback;
        } break;
        case FA_NONE:
            break;
    }
    const bool V_is_K_view = V->view_src && (V->view_src == K || (V->view_src == K->view_src && V->view_offs == K->view_offs));
    uintptr_t base = (uintptr_t) dst->data;
    uintptr_t end  = base + ggml_nbytes(dst);
    if (need_f16_K && K->type != GGML_TYPE_F16) {
        end = GGML_PAD(end, 128);
        end += ggml_nelements(K) * ggml_type_size(GGML_TYPE_F16);
    }
    if (need_f16_V && V->type != GGML_TYPE_F16 && !V_is_K_view) {
        end = GGML_PAD(end, 128);
        end += ggml_nelements(V) * ggml_type_size(GGML_TYPE_F16);
    }
    return end - base;
}

// ---- the device buffer type ----

void * const FAKE_BASE = (void *) (uintptr_t) 0x1000;  // a device address nobody dereferences

void dev_buffer_free(ggml_backend_buffer_t) {}
void * dev_buffer_get_base(ggml_backend_buffer_t) { return FAKE_BASE; }
void dev_buffer_memset(ggml_backend_buffer_t, ggml_tensor *, uint8_t, size_t, size_t) {}
void dev_buffer_set(ggml_backend_buffer_t, ggml_tensor *, const void *, size_t, size_t) {}
void dev_buffer_get(ggml_backend_buffer_t, const ggml_tensor *, void * data, size_t, size_t size) { memset(data, 0, size); }
void dev_buffer_clear(ggml_backend_buffer_t, uint8_t) {}

const ggml_backend_buffer_i dev_buffer_iface = {
    /* .free_buffer   = */ dev_buffer_free,
    /* .get_base      = */ dev_buffer_get_base,
    /* .init_tensor   = */ nullptr,
    /* .memset_tensor = */ dev_buffer_memset,
    /* .set_tensor    = */ dev_buffer_set,
    /* .get_tensor    = */ dev_buffer_get,
    /* .set_tensor_2d = */ nullptr,
    /* .get_tensor_2d = */ nullptr,
    /* .cpy_tensor    = */ nullptr,
    /* .clear         = */ dev_buffer_clear,
    /* .reset         = */ nullptr,
};

const char * buft_get_name(ggml_backend_buffer_type_t buft) {
    return ((standin_device_ctx *) buft->context)->rules.name.c_str();
}

ggml_backend_buffer_t buft_alloc(ggml_backend_buffer_type_t buft, size_t size) {
    return ggml_backend_buffer_init(buft, dev_buffer_iface, nullptr, size);
}

size_t buft_alignment(ggml_backend_buffer_type_t) { return 128; }  // ggml_backend_cuda_buffer_type_get_alignment

size_t buft_alloc_size(ggml_backend_buffer_type_t buft, const ggml_tensor * tensor) {
    const int cc = ((standin_device_ctx *) buft->context)->rules.cc;
    size_t size = tensor->op == GGML_OP_FLASH_ATTN_EXT ? fattn_alloc_size(cc, tensor) : ggml_nbytes(tensor);
    const int64_t ne0 = tensor->ne[0];
    if (ggml_is_quantized(tensor->type) && ne0 % MATRIX_ROW_PADDING != 0) {
        size += ggml_row_size(tensor->type, MATRIX_ROW_PADDING - ne0 % MATRIX_ROW_PADDING);
    }
    return size;
}

const ggml_backend_buffer_type_i dev_buft_iface = {
    /* .get_name         = */ buft_get_name,
    /* .alloc_buffer     = */ buft_alloc,
    /* .alloc_buffer_n   = */ nullptr,
    /* .get_alignment    = */ buft_alignment,
    /* .get_max_size     = */ nullptr,
    /* .get_alloc_size   = */ buft_alloc_size,
    /* .get_alloc_size_n = */ nullptr,
    /* .is_host          = */ nullptr,
};

bool is_standin_buft(ggml_backend_buffer_type_t buft) { return buft && buft->iface.get_name == buft_get_name; }

// ---- the pinned host buffer type (ggml_backend_cuda_host_buffer_type): CPU memory under another name ----

const char * host_buft_name(ggml_backend_buffer_type_t buft) { return (const char *) buft->context; }

ggml_backend_buffer_t host_buft_alloc(ggml_backend_buffer_type_t buft, size_t size) {
    ggml_backend_buffer_t buf = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), size);
    if (buf != nullptr) {
        buf->buft = buft;  // what ggml_backend_cuda_host_buffer_type_alloc_buffer does with its CPU buffer
    }
    return buf;
}

size_t host_buft_alignment(ggml_backend_buffer_type_t) {
    return ggml_backend_buft_get_alignment(ggml_backend_cpu_buffer_type());
}

bool host_buft_is_host(ggml_backend_buffer_type_t) { return true; }

ggml_backend_buffer_type g_host_buft = {
    /* .iface   = */ {
        /* .get_name         = */ host_buft_name,
        /* .alloc_buffer     = */ host_buft_alloc,
        /* .alloc_buffer_n   = */ nullptr,
        /* .get_alignment    = */ host_buft_alignment,
        /* .get_max_size     = */ nullptr,
        /* .get_alloc_size   = */ nullptr,
        /* .get_alloc_size_n = */ nullptr,
        /* .is_host          = */ host_buft_is_host,
    },
    /* .device  = */ nullptr,
    /* .context = */ (void *) "CUDA_Host",
};

// ---- the backend (never computes) ----

const char * backend_name(ggml_backend_t backend) {
    return ((standin_device_ctx *) backend->context)->rules.name.c_str();
}
void backend_free(ggml_backend_t backend) { delete backend; }
void backend_sync(ggml_backend_t) {}
ggml_status backend_compute(ggml_backend_t, ggml_cgraph *) {
    fprintf(stderr, "standin: a stand-in device cannot compute; use it for dry runs only\n");
    return GGML_STATUS_FAILED;
}
void backend_event_record(ggml_backend_t, ggml_backend_event_t) {}
void backend_event_wait(ggml_backend_t, ggml_backend_event_t) {}

ggml_guid_t standin_guid() {
    static ggml_guid guid = {0x5d, 0x1e, 0x7a, 0x6b, 0x00, 0x2f, 0x4c, 0x91, 0x8e, 0x33, 0x10, 0x44, 0x6d, 0x9a, 0x21, 0xc7};
    return &guid;
}

ggml_backend_t dev_init_backend(ggml_backend_dev_t dev, const char *) {
    ggml_backend_i iface = {};
    iface.get_name           = backend_name;
    iface.free               = backend_free;
    iface.synchronize        = backend_sync;
    iface.graph_compute      = backend_compute;
    iface.event_record       = backend_event_record;
    iface.event_wait         = backend_event_wait;
    return new ggml_backend{standin_guid(), iface, dev, dev->context};
}

// ---- the device ----

standin_device_ctx * dctx(ggml_backend_dev_t dev) { return (standin_device_ctx *) dev->context; }

const char * dev_name(ggml_backend_dev_t dev) { return dctx(dev)->rules.name.c_str(); }
const char * dev_desc(ggml_backend_dev_t dev) { return dctx(dev)->rules.desc.c_str(); }
void dev_memory(ggml_backend_dev_t dev, size_t * free, size_t * total) { *free = *total = dctx(dev)->rules.total; }
enum ggml_backend_dev_type dev_type(ggml_backend_dev_t) { return GGML_BACKEND_DEVICE_TYPE_GPU; }
void dev_props(ggml_backend_dev_t dev, ggml_backend_dev_props * props) {
    props->name        = dev_name(dev);
    props->description = dev_desc(dev);
    props->type        = GGML_BACKEND_DEVICE_TYPE_GPU;
    props->device_id   = nullptr;
    dev_memory(dev, &props->memory_free, &props->memory_total);
    props->caps = {
        /* .async                = */ true,
        /* .host_buffer          = */ true,
        /* .buffer_from_host_ptr = */ false,
        /* .events               = */ true,
        /* .mmap_support         = */ true,
    };
}
ggml_backend_buffer_type_t dev_buft(ggml_backend_dev_t dev) { return &dctx(dev)->buft; }
ggml_backend_buffer_type_t dev_host_buft(ggml_backend_dev_t) { return &g_host_buft; }

bool dev_supports_op(ggml_backend_dev_t dev, const ggml_tensor * op) {
    // ggml_backend_cuda_device_supports_op: every source on this device or in host memory
    for (int i = 0; i < GGML_MAX_SRC; i++) {
        if (op->src[i] && op->src[i]->buffer && is_standin_buft(op->src[i]->buffer->buft) &&
            op->src[i]->buffer->buft != &dctx(dev)->buft) {
            return false;
        }
    }
    switch (op->op) {
        case GGML_OP_MUL_MAT:
        case GGML_OP_MUL_MAT_ID: {
            const ggml_tensor * a = op->src[0];
            const ggml_tensor * b = op->src[1];
            if (a->nb[0] != ggml_element_size(a) || b->nb[0] != ggml_element_size(b)) return false;
            if (b->type == GGML_TYPE_F16 && a->type != GGML_TYPE_F16) return false;
            if (op->op == GGML_OP_MUL_MAT_ID && ((const int32_t *) op->op_params)[3] == GGML_PREC_F32) return false;
            switch (a->type) {
                case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1:
                case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_Q8_0: case GGML_TYPE_MXFP4:
                case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
                case GGML_TYPE_Q6_K: case GGML_TYPE_Q8_K: case GGML_TYPE_IQ1_M: case GGML_TYPE_IQ1_S:
                case GGML_TYPE_IQ2_S: case GGML_TYPE_IQ2_XS: case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ3_S:
                case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ4_NL: case GGML_TYPE_IQ4_XS: case GGML_TYPE_BF16:
                    return true;
                default:
                    return false;
            }
        }
        case GGML_OP_FLASH_ATTN_EXT:
            return best_fattn_kernel(dctx(dev)->rules.cc, op) != FA_NONE;
        default:
            return true;
    }
}

bool dev_supports_buft(ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft) { return buft == &dctx(dev)->buft; }

// ggml-cuda.cu get_op_batch_size / ggml_backend_cuda_device_offload_op
int64_t op_batch_size(const ggml_tensor * op) {
    switch (op->op) {
        case GGML_OP_GET_ROWS: return 0;
        case GGML_OP_MUL_MAT: return op->ne[1];
        case GGML_OP_MUL_MAT_ID:
        case GGML_OP_ROPE:
        case GGML_OP_ROPE_BACK: return op->ne[2];
        default: return ggml_nrows(op);
    }
}

int g_min_batch = 32;

bool dev_offload_op(ggml_backend_dev_t, const ggml_tensor * op) { return op_batch_size(op) >= g_min_batch; }

ggml_backend_event_t dev_event_new(ggml_backend_dev_t dev) { return new ggml_backend_event{dev, nullptr}; }
void dev_event_free(ggml_backend_dev_t, ggml_backend_event_t event) { delete event; }
void dev_event_sync(ggml_backend_dev_t, ggml_backend_event_t) {}

const ggml_backend_device_i dev_iface = {
    /* .get_name             = */ dev_name,
    /* .get_description      = */ dev_desc,
    /* .get_memory           = */ dev_memory,
    /* .get_type             = */ dev_type,
    /* .get_props            = */ dev_props,
    /* .init_backend         = */ dev_init_backend,
    /* .get_buffer_type      = */ dev_buft,
    /* .get_host_buffer_type = */ dev_host_buft,
    /* .buffer_from_host_ptr = */ nullptr,
    /* .supports_op          = */ dev_supports_op,
    /* .supports_buft        = */ dev_supports_buft,
    /* .offload_op           = */ dev_offload_op,
    /* .event_new            = */ dev_event_new,
    /* .event_free           = */ dev_event_free,
    /* .event_synchronize    = */ dev_event_sync,
};

// ---- the registry ----

const char * reg_name(ggml_backend_reg_t reg) { return ((standin_reg_ctx *) reg->context)->name.c_str(); }
size_t reg_count(ggml_backend_reg_t reg) { return ((standin_reg_ctx *) reg->context)->devices.size(); }
ggml_backend_dev_t reg_device(ggml_backend_reg_t reg, size_t i) { return &((standin_reg_ctx *) reg->context)->devices[i]; }
void * reg_proc(ggml_backend_reg_t, const char *) { return nullptr; }  // no split buffer type, no extra features

size_t parse_size(const std::string & s, bool * ok) {
    char * end = nullptr;
    const double v = strtod(s.c_str(), &end);
    std::string unit = end ? std::string(end) : "";
    double mul = 1;
    if (unit == "GiB" || unit == "G") mul = 1024.0 * 1024 * 1024;
    else if (unit == "MiB" || unit == "M") mul = 1024.0 * 1024;
    else if (!unit.empty()) { *ok = false; return 0; }
    *ok = v > 0;
    return (size_t) (v * mul);
}

int rocm_cc(const std::string & arch, bool * ok) {
    // common.cuh GGML_CUDA_CC_* for the AMD targets the recordings use
    *ok = true;
    if (arch == "gfx1100" || arch == "gfx1101" || arch == "gfx1102") return CC_OFFSET_AMD + 0x1100;  // RDNA3
    if (arch == "gfx1151") return CC_OFFSET_AMD + 0x1150;                                            // RDNA3.5
    if (arch == "gfx1200" || arch == "gfx1201") return CC_OFFSET_AMD + 0x1200;                       // RDNA4
    if (arch == "gfx1030") return CC_OFFSET_AMD + 0x1030;                                            // RDNA2
    if (arch == "gfx90a") return CC_OFFSET_AMD + 0x90a;                                              // CDNA2
    if (arch == "gfx942") return CC_OFFSET_AMD + 0x942;                                              // CDNA3
    *ok = false;
    return 0;
}

}  // namespace

std::string standin_register(const std::string & spec) {
    if (const char * mb = getenv("GGML_OP_OFFLOAD_MIN_BATCH")) {
        g_min_batch = atoi(mb);
    }
    auto reg_ctx = std::make_unique<standin_reg_ctx>();
    std::vector<device_rules> rules;
    size_t start = 0;
    int n_cuda = 0, n_rocm = 0;
    while (start <= spec.size()) {
        size_t comma = spec.find(',', start);
        std::string one = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        start = comma == std::string::npos ? spec.size() + 1 : comma + 1;
        if (one.empty()) continue;
        std::vector<std::string> parts;
        size_t p = 0;
        while (p <= one.size()) {
            size_t c = one.find(':', p);
            parts.push_back(one.substr(p, c == std::string::npos ? std::string::npos : c - p));
            p = c == std::string::npos ? one.size() + 1 : c + 1;
        }
        if (parts.size() < 2) return "standin: expected KIND:SIZE[:cc=N|:arch=gfxN], got '" + one + "'";
        device_rules r{};
        bool ok = false;
        r.total = parse_size(parts[1], &ok);
        if (!ok) return "standin: bad size '" + parts[1] + "'";
        if (parts[0] == "cuda") {
            r.k = kind::cuda;
            r.cc = 890;
            r.arch = "cc=89";
            for (size_t i = 2; i < parts.size(); i++) {
                if (parts[i].rfind("cc=", 0) == 0) {
                    r.cc = atoi(parts[i].c_str() + 3) * 10;
                    r.arch = parts[i];
                } else {
                    return "standin: unknown cuda option '" + parts[i] + "'";
                }
            }
            r.name = "CUDA" + std::to_string(n_cuda++);
        } else if (parts[0] == "rocm") {
            r.k = kind::rocm;
            r.arch = "gfx1100";
            for (size_t i = 2; i < parts.size(); i++) {
                if (parts[i].rfind("arch=", 0) == 0) {
                    r.arch = parts[i].substr(5);
                } else {
                    return "standin: unknown rocm option '" + parts[i] + "'";
                }
            }
            r.cc = rocm_cc(r.arch, &ok);
            if (!ok) return "standin: unknown AMD arch '" + r.arch + "'";
            r.name = "ROCm" + std::to_string(n_rocm++);
        } else {
            return "standin: unknown kind '" + parts[0] + "' (cuda, rocm)";
        }
        r.desc = "stand-in " + parts[0] + " " + r.arch;
        rules.push_back(r);
    }
    if (rules.empty()) return "standin: no device";
    reg_ctx->name = rules[0].k == kind::rocm ? "ROCm" : "CUDA";
    reg_ctx->devices.resize(rules.size());
    auto * reg = new ggml_backend_reg{GGML_BACKEND_API_VERSION, {reg_name, reg_count, reg_device, reg_proc}, reg_ctx.get()};
    for (size_t i = 0; i < rules.size(); i++) {
        auto c = std::make_unique<standin_device_ctx>();
        c->rules = rules[i];
        c->index = (int) i;
        c->buft  = ggml_backend_buffer_type{dev_buft_iface, &reg_ctx->devices[i], c.get()};
        reg_ctx->devices[i] = ggml_backend_device{dev_iface, reg, c.get()};
        g_describe += rules[i].name + " " + rules[i].desc + " total=" + std::to_string(rules[i].total) +
                      " align=128 row_padding=512 offload_min_batch=" + std::to_string(g_min_batch) + "\n";
        reg_ctx->ctxs.push_back(std::move(c));
    }
    g_host_buft.device = &reg_ctx->devices[0];
    g_host_buft.context = (void *) (rules[0].k == kind::rocm ? "ROCm_Host" : "CUDA_Host");
    g_reg_objs.emplace_back(reg);
    g_regs.push_back(std::move(reg_ctx));
    ggml_backend_register(reg);
    return "";
}

std::string standin_describe() { return g_describe; }
