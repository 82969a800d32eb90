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
//
// What it reproduces of ggml-vulkan (ggml-vulkan/ggml-vulkan.cpp), `vulkan:16GiB[:align=64][:maxalloc=4GiB]...`:
//   - the device buffer type "Vulkan<n>": alignment minStorageBufferOffsetAlignment
//     (ggml_backend_vk_buffer_type_get_alignment), max size suballocation_block_size = min(1 GiB,
//     maxMemoryAllocationSize) (ggml_backend_vk_buffer_type_get_max_size, ggml_vk_get_device), so ggml-alloc splits
//     weights into buffers and the compute buffer into chunks of at most 1 GiB; get_alloc_size = ggml_nbytes
//     (ggml_backend_vk_buffer_type_get_alloc_size: no row padding, no flash-attention extras);
//   - the pinned host buffer type "Vulkan_Host": alignment minMemoryMapAlignment, the same 1 GiB max size, 32 bytes
//     more per allocation (ggml_backend_vk_host_buffer_type_*);
//   - supports_op: no tensor above max_buffer_size or maxStorageBufferRange (without 64-bit indexing), and the
//     type rules of ggml_backend_vk_device_supports_op for the ops of transformer graphs (vk_supports_op);
//   - offload_op: batch >= 32 (ggml_backend_vk_device_offload_op, ggml_vk_get_op_batch_size); events, async,
//     host buffer (ggml_backend_vk_device_get_props), so several devices run pipeline-parallel.
// Not seen by a dry run: ggml-vulkan's own preallocated staging buffers (prealloc_x/y, split_k), sized at compute.
//
// What it reproduces of ggml-metal (ggml-metal.cpp, ggml-metal-device.m, ggml-metal-ops.cpp), `metal:64GiB`:
//   - the device buffer type "MTL0" (shared: unified memory): alignment 32, max size maxBufferLength,
//     get_alloc_size with the extras of MUL_MAT_ID (expert counts, ids, amax) and FLASH_ATTN_EXT (the padding
//     block, the block mask, the workgroup results, the f16 copies of K and V, which are always reserved, and the
//     sparse index lists), ARGSORT / CUMSUM doubled, TOP_K's index pairs (ggml_backend_metal_buffer_type_get_alloc_size);
//   - no host buffer type (get_host_buffer_type NULL): host-side weights and compute stay in CPU buffers, and the
//     CPU's repacked buffer types apply (those of the recording host, not of an Apple CPU);
//   - supports_op of an Apple7+ GPU (ggml_metal_device_supports_op); offload_op only for MUL_MAT / MUL_MAT_ID from a
//     batch of 32 (ggml_backend_metal_device_offload_op); one device.

#include "standin.h"

#include "ggml-backend-impl.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

enum class kind { cuda, rocm, vulkan, metal };

struct device_rules {
    kind        k;
    int         cc;        // ggml-cuda's compute capability number (NVIDIA: major*100 + minor*10; AMD: offset + gfx id)
    size_t      total;     // bytes the device reports
    std::string name;      // CUDA0, ROCm0, Vulkan0, MTL0
    std::string desc;
    std::string arch;      // as given
    // Vulkan (ggml-vulkan.cpp ggml_vk_get_device): the device limits its buffer types answer with
    size_t      align      = 128;       // CUDA 128; Vulkan minStorageBufferOffsetAlignment; Metal 32
    size_t      max_size   = SIZE_MAX;  // buffer type max size: Vulkan suballocation_block_size, Metal maxBufferLength
    size_t      max_buffer = SIZE_MAX;  // Vulkan max_buffer_size (a larger tensor is refused by supports_op)
    size_t      max_range  = SIZE_MAX;  // Vulkan maxStorageBufferRange (idem, without shader 64-bit indexing)
    size_t      host_align = 0;         // Vulkan_Host: minMemoryMapAlignment (0: the CPU buffer type's)
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

// ---- Vulkan (ggml-vulkan/ggml-vulkan.cpp at 515e85511) ----

bool vk_dim01_contiguous(const ggml_tensor * t) {  // ggml_vk_dim01_contiguous
    return t->nb[0] == ggml_type_size(t->type) && t->nb[1] == (t->nb[0] * t->ne[0]) / ggml_blck_size(t->type) &&
           (t->ne[3] == 1 || t->nb[3] == t->nb[2] * t->ne[2]);
}

bool vk_weight_type(ggml_type t, bool get_rows) {  // the src0 types of MUL_MAT / MUL_MAT_ID and GET_ROWS
    switch (t) {
        case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_Q1_0: case GGML_TYPE_Q2_0:
        case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_Q8_0:
        case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K:
        case GGML_TYPE_IQ1_S: case GGML_TYPE_IQ1_M: case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS: case GGML_TYPE_IQ2_S:
        case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ3_S: case GGML_TYPE_IQ4_XS: case GGML_TYPE_IQ4_NL: case GGML_TYPE_MXFP4:
        case GGML_TYPE_NVFP4: case GGML_TYPE_TQ1_0: case GGML_TYPE_TQ2_0:
            return true;
        case GGML_TYPE_I32:
            return get_rows;
        default:
            return false;
    }
}

bool vk_cpy_type(ggml_type t) {  // the quantized/float targets of the f32 copy shaders (SET_ROWS, CPY)
    switch (t) {
        case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_Q1_0: case GGML_TYPE_Q2_0:
        case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_Q8_0:
        case GGML_TYPE_IQ4_NL:
            return true;
        default:
            return false;
    }
}

bool is_f32_f16(ggml_type t) { return t == GGML_TYPE_F32 || t == GGML_TYPE_F16; }

// ggml_backend_vk_device_supports_op for the ops of the recorded transformer graphs. A typical discrete device is
// assumed: MUL_MAT_ID shaders present (mul_mat_id_s/m/l), subgroup shuffle and vote (flash attention), the Vulkan
// memory model (large argsort), top-k pipelines; ops not listed here are answered as supported.
bool vk_supports_op(const device_rules & r, const ggml_tensor * op) {
    // "reject any tensors larger than the max buffer size": max_buffer_size, and maxStorageBufferRange without
    // shader 64-bit indexing (IM2COL with buffer device address excepted; not in these graphs)
    auto size_ok = [&](size_t n) { return n <= r.max_buffer && n <= r.max_range; };
    for (int i = 0; i < GGML_MAX_SRC; i++) {
        if (op->src[i] && !size_ok(ggml_nbytes(op->src[i]))) return false;
    }
    if (!size_ok(ggml_nbytes(op))) return false;
    const ggml_tensor * s0 = op->src[0];
    const ggml_tensor * s1 = op->src[1];
    switch (op->op) {
        case GGML_OP_UNARY:
            switch (ggml_get_unary_op(op)) {
                case GGML_UNARY_OP_EXP: case GGML_UNARY_OP_EXPM1: case GGML_UNARY_OP_ELU: case GGML_UNARY_OP_GELU:
                case GGML_UNARY_OP_GELU_ERF: case GGML_UNARY_OP_GELU_QUICK: case GGML_UNARY_OP_SILU:
                case GGML_UNARY_OP_RELU: case GGML_UNARY_OP_XIELU: case GGML_UNARY_OP_NEG: case GGML_UNARY_OP_TANH:
                case GGML_UNARY_OP_SIGMOID: case GGML_UNARY_OP_HARDSIGMOID: case GGML_UNARY_OP_HARDSWISH:
                case GGML_UNARY_OP_ABS: case GGML_UNARY_OP_SOFTPLUS: case GGML_UNARY_OP_STEP: case GGML_UNARY_OP_ROUND:
                case GGML_UNARY_OP_CEIL: case GGML_UNARY_OP_FLOOR: case GGML_UNARY_OP_TRUNC: case GGML_UNARY_OP_SGN:
                    return is_f32_f16(s0->type) && is_f32_f16(op->type) && s0->type == op->type;
                default:
                    return false;
            }
        case GGML_OP_GLU:
            switch (ggml_get_glu_op(op)) {
                case GGML_GLU_OP_GEGLU: case GGML_GLU_OP_REGLU: case GGML_GLU_OP_SWIGLU: case GGML_GLU_OP_SWIGLU_OAI:
                case GGML_GLU_OP_GEGLU_ERF: case GGML_GLU_OP_GEGLU_QUICK: case GGML_GLU_OP_SWIGLU_CLAMP:
                    return is_f32_f16(s0->type) && is_f32_f16(op->type) && s0->type == op->type &&
                           (!s1 || s1->type == s0->type);
                default:
                    return false;
            }
        case GGML_OP_MUL_MAT:
        case GGML_OP_MUL_MAT_ID: {
            if (op->op == GGML_OP_MUL_MAT_ID && ((const int32_t *) op->op_params)[3] == GGML_PREC_F32) return false;
            if (!vk_weight_type(s0->type, false)) return false;
            const ggml_tensor * a = op->op == GGML_OP_MUL_MAT ? s0 : op->src[2];
            if (a->ne[3] != s1->ne[3]) return false;
            const bool float0 = s0->type == GGML_TYPE_F32 || s0->type == GGML_TYPE_F16 || s0->type == GGML_TYPE_BF16;
            if (!(vk_dim01_contiguous(s0) || float0) || !(vk_dim01_contiguous(s1) || is_f32_f16(s1->type))) return false;
            if (s0->type == GGML_TYPE_BF16 && s1->type == GGML_TYPE_F16) return false;
            if (s1->type == GGML_TYPE_BF16 && s0->type != GGML_TYPE_BF16) return false;
            return true;
        }
        case GGML_OP_FLASH_ATTN_EXT: {
            const ggml_tensor * K = op->src[1];
            const ggml_tensor * V = op->src[2];
            if (K->ne[0] % 8 != 0 || V->ne[0] % 8 != 0) return false;
            if (op->src[4] && op->src[4]->type != GGML_TYPE_F32) return false;
            if (s0->type != GGML_TYPE_F32 || op->type != GGML_TYPE_F32) return false;
            if (op->src[3] && op->src[3]->type != GGML_TYPE_F16) return false;
            auto kv_ok = [](ggml_type t) {
                return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16 || t == GGML_TYPE_Q8_0 ||
                       t == GGML_TYPE_Q5_1 || t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q4_0 ||
                       t == GGML_TYPE_IQ4_NL;
            };
            if (!kv_ok(K->type) || !kv_ok(V->type)) return false;
            return (K->type == GGML_TYPE_BF16) == (V->type == GGML_TYPE_BF16);
        }
        case GGML_OP_GET_ROWS:
            return vk_weight_type(s0->type, true);
        case GGML_OP_SET_ROWS:
            if (!is_f32_f16(s0->type) || (s1->type != GGML_TYPE_I32 && s1->type != GGML_TYPE_I64)) return false;
            return vk_cpy_type(op->type);
        case GGML_OP_CONT:
        case GGML_OP_CPY:
        case GGML_OP_DUP: {
            const ggml_type t0 = s0->type;
            const ggml_type t1 = s1 ? s1->type : t0;
            if (t0 == GGML_TYPE_F32 && vk_cpy_type(t1)) return true;
            if (t1 == GGML_TYPE_F32 && vk_cpy_type(t0)) return true;
            if ((t0 == GGML_TYPE_F32 && t1 == GGML_TYPE_I32) || (t0 == GGML_TYPE_I32 && t1 == GGML_TYPE_F32)) return true;
            return t0 == t1 && (!ggml_is_quantized(t0) || (ggml_is_contiguous(s0) && ggml_is_contiguous(op))) &&
                   ggml_type_size(t0) % 2 == 0;
        }
        case GGML_OP_REPEAT:
            return ggml_type_size(op->type) == ggml_type_size(s0->type) &&
                   (ggml_type_size(op->type) == sizeof(float) || ggml_type_size(op->type) == 2);
        case GGML_OP_ROPE:
            return ggml_is_contiguous_rows(op) && ggml_is_contiguous_rows(s0);
        case GGML_OP_NORM:
        case GGML_OP_L2_NORM:
            return s0->type == GGML_TYPE_F32 && op->type == GGML_TYPE_F32;
        case GGML_OP_ADD:
        case GGML_OP_SUB:
        case GGML_OP_MUL:
        case GGML_OP_DIV:
            return is_f32_f16(s0->type) && is_f32_f16(s1->type) && is_f32_f16(op->type);
        case GGML_OP_ADD_ID:
            return s0->type == GGML_TYPE_F32 && s1->type == GGML_TYPE_F32 && op->src[2]->type == GGML_TYPE_I32 &&
                   op->type == GGML_TYPE_F32;
        case GGML_OP_SQR: case GGML_OP_SQRT: case GGML_OP_SIN: case GGML_OP_COS: case GGML_OP_CLAMP:
        case GGML_OP_LEAKY_RELU: case GGML_OP_LOG:
            return is_f32_f16(s0->type) && op->type == s0->type;
        case GGML_OP_ARGSORT:
        case GGML_OP_TOP_K:
            return ggml_is_contiguous(op) && ggml_is_contiguous(s0);
        case GGML_OP_SCALE:
        case GGML_OP_DIAG_MASK_INF:
            return ggml_is_contiguous(s0) && s0->type == GGML_TYPE_F32;
        case GGML_OP_SOFT_MAX:
            return ggml_is_contiguous(s0) && s0->type == GGML_TYPE_F32 && (!s1 || is_f32_f16(s1->type));
        case GGML_OP_SUM:
        case GGML_OP_SUM_ROWS:
        case GGML_OP_MEAN:
            return s0->type == GGML_TYPE_F32 && ggml_is_contiguous_rows(s0);
        case GGML_OP_PAD:
        case GGML_OP_ROLL:
        case GGML_OP_SSM_CONV:
            return s0->type == GGML_TYPE_F32;
        case GGML_OP_ACC:
            return s0->type == GGML_TYPE_F32 && s1->type == GGML_TYPE_F32 && op->type == GGML_TYPE_F32;
        case GGML_OP_GROUP_NORM:
            return ggml_is_contiguous(s0);
        default:
            return true;
    }
}

// ---- Metal (ggml-metal/ggml-metal.cpp, ggml-metal-device.m, ggml-metal-ops.cpp, ggml-metal-impl.h at 515e85511) ----

constexpr int MTL_N_MM_NPART_AMAX  = 256;  // ggml-metal-impl.h N_MM_NPART_AMAX
constexpr int MTL_FA_NQPSG         = 8;    // OP_FLASH_ATTN_EXT_NQPSG
constexpr int MTL_FA_NCPSG         = 64;   // OP_FLASH_ATTN_EXT_NCPSG
constexpr int MTL_FA_VEC_NQPSG     = 1;    // OP_FLASH_ATTN_EXT_VEC_NQPSG
constexpr int MTL_FA_VEC_NCPSG     = 32;   // OP_FLASH_ATTN_EXT_VEC_NCPSG

bool mtl_fa_use_vec(const ggml_tensor * op) {  // ggml_metal_op_flash_attn_ext_use_vec
    return op->src[0]->ne[1] < 20 && op->src[0]->ne[0] % 32 == 0;
}

bool mtl_fa_use_kv_f16(const ggml_tensor * op) {  // ggml_metal_op_flash_attn_ext_use_kv_f16
    if (op->src[0]->ne[1] < 32) return false;
    switch (op->src[1]->type) {
        case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_Q8_0:
            return true;
        default:
            return false;
    }
}

bool mtl_v_is_view_of_k(const ggml_tensor * op) {  // ggml_metal_op_flash_attn_ext_v_is_view_of_k
    const ggml_tensor * K = op->src[1];
    const ggml_tensor * V = op->src[2];
    return V->view_src && (V->view_src == K || (V->view_src == K->view_src && V->view_offs == K->view_offs));
}

int mtl_fa_n_kv_max_sparse(const ggml_tensor * op) {  // ggml_metal_op_flash_attn_ext_n_kv_max_sparse
    int32_t n_kv_max = 0;
    memcpy(&n_kv_max, ((const int32_t *) op->op_params) + 4, sizeof(n_kv_max));
    if (n_kv_max <= 0 || !op->src[3] || n_kv_max > 4096) return 0;
    const int64_t dk = op->src[1]->ne[0];
    const int64_t dv = op->src[2]->ne[0];
    const bool dk_dv_ok = (dk == 32 && dv == 32) || (dk == 64 && dv == 64) || (dk == 96 && dv == 96) ||
                          (dk == 96 && dv == 64) || (dk == 128 && dv == 128) || (dk == 192 && dv == 128) ||
                          (dk == 192 && dv == 192) || (dk == 256 && dv == 256) || (dk == 320 && dv == 256) ||
                          (dk == 512 && dv == 512) || (dk == 576 && dv == 512);
    if (!dk_dv_ok) return 0;
    switch (op->src[1]->type) {
        case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_F32: case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1:
        case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_Q8_0:
            return n_kv_max;
        default:
            return 0;
    }
}

// ggml-metal.cpp ggml_backend_metal_buffer_type_get_alloc_size with the ggml_metal_op_*_extra_* sizes it adds
size_t mtl_alloc_size(const ggml_tensor * t) {
    size_t res = ggml_nbytes(t);
    switch (t->op) {
        case GGML_OP_MUL_MAT_ID: {
            const int64_t ne02 = t->src[0]->ne[2];  // n_expert
            const int64_t ne21 = t->src[2]->ne[1];  // n_token
            res += ggml_type_size(GGML_TYPE_I32) * ne02;                  // extra_tpe
            res += ggml_type_size(GGML_TYPE_I32) * ne02 * ne21;           // extra_ids
            res += 8 + MTL_N_MM_NPART_AMAX * sizeof(float);               // extra_amax
        } break;
        case GGML_OP_FLASH_ATTN_EXT: {
            const ggml_tensor * Q = t->src[0];
            const ggml_tensor * K = t->src[1];
            const ggml_tensor * V = t->src[2];
            const ggml_tensor * M = t->src[3];
            // extra_pad: always reserved for the non-vec kernel (the larger one)
            const bool use_kv_f16 = mtl_fa_use_kv_f16(t);
            const bool vk_view = use_kv_f16 && mtl_v_is_view_of_k(t);
            uint64_t nb11 = K->nb[1];
            uint64_t nb21 = V->nb[1];
            if (use_kv_f16) {
                nb11 = sizeof(ggml_fp16_t) * K->ne[0];
                nb21 = sizeof(ggml_fp16_t) * (vk_view ? K->ne[0] : V->ne[0]);
            }
            res += MTL_FA_NCPSG * (nb11 * K->ne[2] * K->ne[3] + nb21 * V->ne[2] * V->ne[3] +
                                   (M ? ggml_type_size(GGML_TYPE_F16) * M->ne[1] * M->ne[2] * M->ne[3] : 0));
            // extra_blk
            if (M) {
                const bool is_vec = mtl_fa_use_vec(t);
                const int nqptg = is_vec ? MTL_FA_VEC_NQPSG : MTL_FA_NQPSG;
                const int ncpsg = is_vec ? MTL_FA_VEC_NCPSG : MTL_FA_NCPSG;
                const int64_t ne1 = (Q->ne[1] + nqptg - 1) / nqptg;
                const int64_t ne0 = (M->ne[0] + ncpsg - 1) / ncpsg;
                res += GGML_PAD(ggml_type_size(GGML_TYPE_I8) * ne0 * ne1 * M->ne[2] * M->ne[3], 32);
            }
            // extra_tmp: always reserved
            {
                const int64_t nwg = 32;
                const int64_t ne01_max = std::min<int64_t>(Q->ne[1], 32);
                res += ggml_type_size(GGML_TYPE_F32) * (ne01_max * Q->ne[2] * Q->ne[3] * nwg * (V->ne[0] + 2));
            }
            // extra_kv_f16: always reserved (K's f16 copy, V's unless V is a view of K)
            {
                const size_t k_size =
                    GGML_PAD(sizeof(ggml_fp16_t) * (size_t) K->ne[0] * K->ne[1] * K->ne[2] * K->ne[3], 16);
                res += k_size;
                if (!mtl_v_is_view_of_k(t)) {
                    res += GGML_PAD(sizeof(ggml_fp16_t) * (size_t) V->ne[0] * V->ne[1] * V->ne[2] * V->ne[3], 16);
                }
            }
            // extra_idx: the sparse index lists
            const int n_kv_max = mtl_fa_n_kv_max_sparse(t);
            if (n_kv_max > 0) {
                const int padded = GGML_PAD(n_kv_max, MTL_FA_VEC_NCPSG);
                res += GGML_PAD(sizeof(int32_t) * (size_t) padded * M->ne[1] * M->ne[2] * M->ne[3], 16);
            }
        } break;
        case GGML_OP_CUMSUM:
        case GGML_OP_ARGSORT:
            res *= 2;
            break;
        case GGML_OP_TOP_K:
            res = 2 * sizeof(int32_t) * ggml_nelements(t->src[0]);
            break;
        default:
            break;
    }
    return res;
}

// ggml-metal-device.m ggml_metal_device_supports_op on an Apple7+ GPU (simdgroup reduction and matrix multiply,
// bfloat), for the ops of the recorded graphs; ops not listed are answered as supported.
bool mtl_supports_op(const ggml_tensor * op) {
    const ggml_tensor * s0 = op->src[0];
    const ggml_tensor * s1 = op->src[1];
    switch (op->op) {
        case GGML_OP_SCALE: case GGML_OP_FILL: case GGML_OP_CLAMP: case GGML_OP_SQR: case GGML_OP_SQRT:
        case GGML_OP_SIN: case GGML_OP_COS: case GGML_OP_LOG:
            return ggml_is_contiguous_rows(s0) && is_f32_f16(s0->type);
        case GGML_OP_UNARY:
            switch (ggml_get_unary_op(op)) {
                case GGML_UNARY_OP_TANH: case GGML_UNARY_OP_RELU: case GGML_UNARY_OP_SIGMOID: case GGML_UNARY_OP_GELU:
                case GGML_UNARY_OP_GELU_ERF: case GGML_UNARY_OP_GELU_QUICK: case GGML_UNARY_OP_SILU:
                case GGML_UNARY_OP_ELU: case GGML_UNARY_OP_NEG: case GGML_UNARY_OP_ABS: case GGML_UNARY_OP_SGN:
                case GGML_UNARY_OP_STEP: case GGML_UNARY_OP_HARDSWISH: case GGML_UNARY_OP_HARDSIGMOID:
                case GGML_UNARY_OP_EXP: case GGML_UNARY_OP_SOFTPLUS: case GGML_UNARY_OP_EXPM1: case GGML_UNARY_OP_FLOOR:
                case GGML_UNARY_OP_CEIL: case GGML_UNARY_OP_ROUND: case GGML_UNARY_OP_TRUNC: case GGML_UNARY_OP_XIELU:
                    return ggml_is_contiguous_rows(s0) && is_f32_f16(s0->type);
                default:
                    return false;
            }
        case GGML_OP_GLU:
            return ggml_is_contiguous_1(s0) && is_f32_f16(s0->type);
        case GGML_OP_ADD: case GGML_OP_SUB: case GGML_OP_MUL: case GGML_OP_DIV: case GGML_OP_ADD_ID:
            return ggml_is_contiguous_rows(s0) && ggml_is_contiguous_rows(s1) && is_f32_f16(s0->type) &&
                   s0->type == s1->type;
        case GGML_OP_SUM:
            return ggml_is_contiguous(s0);
        case GGML_OP_SUM_ROWS: case GGML_OP_CUMSUM: case GGML_OP_MEAN: case GGML_OP_SOFT_MAX: case GGML_OP_GROUP_NORM:
        case GGML_OP_L2_NORM: case GGML_OP_NORM: case GGML_OP_RMS_NORM: case GGML_OP_TRI:
            return ggml_is_contiguous_rows(s0);
        case GGML_OP_FLASH_ATTN_EXT: {
            switch (s0->ne[0]) {
                case 32: case 40: case 48: case 64: case 72: case 80: case 96: case 112: case 128: case 192:
                case 256: case 320: case 512: case 576:
                    break;
                default:
                    return false;
            }
            const ggml_tensor * K = op->src[1];
            const ggml_tensor * V = op->src[2];
            if (K->ne[0] == 72 && K->ne[0] != V->ne[0]) return false;
            if (K->ne[0] < V->ne[0] || K->type != V->type) return false;
            switch (K->type) {
                case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_Q8_0: case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1:
                case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_BF16:
                    return true;
                default:
                    return false;
            }
        }
        case GGML_OP_MUL_MAT:
        case GGML_OP_MUL_MAT_ID:
            // ggml_metal_supports_mul_mat_op: an F16 src1 only with an F16 weight (mat-vec) or the simdgroup
            // matrix path (taken as available on Apple7+)
            if (s0->type == GGML_TYPE_NVFP4 || s0->type == GGML_TYPE_TQ1_0) return false;
            if (s1->type != GGML_TYPE_F16) return true;
            return s0->type != GGML_TYPE_BF16;
        case GGML_OP_GET_ROWS:
            return s0->type != GGML_TYPE_NVFP4 && s0->type != GGML_TYPE_TQ1_0;
        case GGML_OP_SET_ROWS:
            if (s0->type == GGML_TYPE_F16) return op->type == GGML_TYPE_F16;
            if (s0->type != GGML_TYPE_F32) return false;
            switch (op->type) {
                case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_Q8_0: case GGML_TYPE_Q4_0:
                case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_IQ4_NL: case GGML_TYPE_TQ2_0:
                    return true;
                default:
                    return false;
            }
        case GGML_OP_SET: case GGML_OP_CPY: case GGML_OP_DUP: case GGML_OP_CONT:
            switch (s0->type) {
                case GGML_TYPE_F32:
                    return vk_cpy_type(op->type) || op->type == GGML_TYPE_TQ2_0 || op->type == GGML_TYPE_I32;
                case GGML_TYPE_F16:
                    return is_f32_f16(op->type);
                case GGML_TYPE_BF16:
                    return op->type == GGML_TYPE_F32 || op->type == GGML_TYPE_BF16;
                case GGML_TYPE_Q1_0: case GGML_TYPE_Q2_0: case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0:
                case GGML_TYPE_Q5_1: case GGML_TYPE_Q8_0: case GGML_TYPE_TQ2_0:
                    return is_f32_f16(op->type);
                case GGML_TYPE_I32:
                    return op->type == GGML_TYPE_F32 || op->type == GGML_TYPE_I32;
                default:
                    return false;
            }
        case GGML_OP_ROLL:
            return ggml_is_contiguous(s0);
        case GGML_OP_PAD:
        case GGML_OP_UPSCALE:
            return s0->type == GGML_TYPE_F32;
        default:
            return true;
    }
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

// Every device buffer llama.cpp (or clip) allocates, in order: "CUDA0 <bytes>" lines (standin_allocations).
// Never freed: it is read at exit, when other static objects may already be gone.
std::string & allocations() {
    static std::string * all = new std::string;
    return *all;
}

ggml_backend_buffer_t buft_alloc(ggml_backend_buffer_type_t buft, size_t size) {
    if (size > 0) {
        allocations() += std::string(buft_get_name(buft)) + " " + std::to_string(size) + "\n";
    }
    return ggml_backend_buffer_init(buft, dev_buffer_iface, nullptr, size);
}

// ggml_backend_cuda_buffer_type_get_alignment (128), ggml_backend_vk_buffer_type_get_alignment
// (minStorageBufferOffsetAlignment), ggml_backend_metal_buffer_type_shared_get_alignment (32)
size_t buft_alignment(ggml_backend_buffer_type_t buft) { return ((standin_device_ctx *) buft->context)->rules.align; }

// ggml-cuda: no get_max_size (SIZE_MAX); ggml_backend_vk_buffer_type_get_max_size (suballocation_block_size: 1 GiB
// unless maxMemoryAllocationSize is smaller); ggml_backend_metal_buffer_type_shared_get_max_size (maxBufferLength).
// ggml-alloc splits the weights into buffers of at most this size and the compute buffer into chunks.
size_t buft_max_size(ggml_backend_buffer_type_t buft) { return ((standin_device_ctx *) buft->context)->rules.max_size; }

size_t buft_alloc_size(ggml_backend_buffer_type_t buft, const ggml_tensor * tensor) {
    const device_rules & r = ((standin_device_ctx *) buft->context)->rules;
    if (r.k == kind::vulkan) {
        return ggml_nbytes(tensor);  // ggml_backend_vk_buffer_type_get_alloc_size
    }
    if (r.k == kind::metal) {
        return mtl_alloc_size(tensor);  // ggml_backend_metal_buffer_type_get_alloc_size
    }
    const int cc = r.cc;
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
    /* .get_max_size     = */ buft_max_size,
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

size_t g_host_align = 0;            // Vulkan_Host: minMemoryMapAlignment; 0: the CPU buffer type's
size_t g_host_max_size = SIZE_MAX;  // Vulkan_Host: devices[0]->suballocation_block_size
size_t g_host_extra = 0;            // Vulkan_Host allocates 32 bytes more ("Behave like the CPU buffer type")

ggml_backend_buffer_t host_buft_alloc_extra(ggml_backend_buffer_type_t buft, size_t size) {
    return host_buft_alloc(buft, size + g_host_extra);
}

size_t host_buft_alignment(ggml_backend_buffer_type_t) {
    // ggml_backend_vk_host_buffer_type_get_alignment (minMemoryMapAlignment); CUDA_Host: the CPU buffer type's
    return g_host_align ? g_host_align : ggml_backend_buft_get_alignment(ggml_backend_cpu_buffer_type());
}

size_t host_buft_max_size(ggml_backend_buffer_type_t) { return g_host_max_size; }

bool host_buft_is_host(ggml_backend_buffer_type_t) { return true; }

ggml_backend_buffer_type g_host_buft = {
    /* .iface   = */ {
        /* .get_name         = */ host_buft_name,
        /* .alloc_buffer     = */ host_buft_alloc_extra,
        /* .alloc_buffer_n   = */ nullptr,
        /* .get_alignment    = */ host_buft_alignment,
        /* .get_max_size     = */ host_buft_max_size,
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
enum ggml_backend_dev_type dev_type(ggml_backend_dev_t) { return GGML_BACKEND_DEVICE_TYPE_GPU; }  // discrete; Metal: GPU
void dev_props(ggml_backend_dev_t dev, ggml_backend_dev_props * props) {
    props->name        = dev_name(dev);
    props->description = dev_desc(dev);
    props->type        = GGML_BACKEND_DEVICE_TYPE_GPU;
    props->device_id   = nullptr;
    dev_memory(dev, &props->memory_free, &props->memory_total);
    // ggml_backend_cuda_device_get_props, ggml_backend_vk_device_get_props: a pinned host buffer, no
    // buffer_from_host_ptr; ggml_backend_metal_device_get_props: no host buffer, buffer_from_host_ptr (used only to
    // map an mmap'd file, which a dry run never does)
    const bool metal = dctx(dev)->rules.k == kind::metal;
    props->caps = {
        /* .async                = */ true,
        /* .host_buffer          = */ !metal,
        /* .buffer_from_host_ptr = */ metal,
        /* .events               = */ true,
        /* .mmap_support         = */ true,
    };
}
ggml_backend_buffer_type_t dev_buft(ggml_backend_dev_t dev) { return &dctx(dev)->buft; }
// Metal: get_host_buffer_type = NULL (the CPU's buffers stay plain CPU buffers)
ggml_backend_buffer_type_t dev_host_buft(ggml_backend_dev_t dev) {
    return dctx(dev)->rules.k == kind::metal ? nullptr : &g_host_buft;
}

bool dev_supports_op(ggml_backend_dev_t dev, const ggml_tensor * op) {
    if (dctx(dev)->rules.k == kind::vulkan) {
        return vk_supports_op(dctx(dev)->rules, op);
    }
    if (dctx(dev)->rules.k == kind::metal) {
        return mtl_supports_op(op);
    }
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

// ggml-vulkan: ggml_backend_vk_device_offload_op with ggml_vk_get_op_batch_size (ggml-vulkan-debug.cpp), the same
// rule; ggml-metal.cpp ggml_backend_metal_device_offload_op: only MUL_MAT / MUL_MAT_ID (its get_op_batch_size has
// no GET_ROWS / ROPE cases, irrelevant for these two ops)
bool dev_offload_op(ggml_backend_dev_t dev, const ggml_tensor * op) {
    if (dctx(dev)->rules.k == kind::metal && op->op != GGML_OP_MUL_MAT && op->op != GGML_OP_MUL_MAT_ID) {
        return false;
    }
    return op_batch_size(op) >= g_min_batch;
}

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

// vulkan options: align= (minStorageBufferOffsetAlignment), maxalloc= (maxMemoryAllocationSize), maxbuf=
// (maxBufferSize), maxrange= (maxStorageBufferRange), mapalign= (minMemoryMapAlignment, the Vulkan_Host alignment),
// idx64=1 (VK_EXT_shader_64bit_indexing: no storage-range limit on a tensor; ggml_vk_get_device shader_64b_indexing)
std::string parse_vulkan(device_rules & r, const std::vector<std::string> & parts) {
    // defaults: a typical discrete desktop card (the values fitplan assumes): 64-byte storage-buffer offsets, 4 GiB
    // allocations and storage ranges, 64-byte mapped-memory alignment
    r.align = 64;
    size_t maxalloc = (size_t) 4 << 30;
    size_t maxbuf = 0;
    r.max_range = ((size_t) 4 << 30) - 1;
    r.host_align = 64;
    for (size_t i = 2; i < parts.size(); i++) {
        const std::string & o = parts[i];
        const size_t eq = o.find('=');
        const std::string key = o.substr(0, eq);
        bool ok = eq != std::string::npos;
        size_t v = 0;
        if (ok && key == "idx64") {
            v = o.substr(eq + 1) == "1";
        } else if (ok) {
            v = parse_size(o.substr(eq + 1), &ok);
        }
        if (!ok) return "standin: bad vulkan option '" + o + "'";
        if (key == "align") r.align = v;
        else if (key == "maxalloc") maxalloc = v;
        else if (key == "maxbuf") maxbuf = v;
        else if (key == "maxrange") r.max_range = v;
        else if (key == "mapalign") r.host_align = v;
        else if (key == "idx64") r.max_range = v ? SIZE_MAX : r.max_range;  // VK_EXT_shader_64bit_indexing
        else return "standin: unknown vulkan option '" + o + "'";
    }
    // ggml_vk_get_device: max_buffer_size = maxBufferSize (maintenance4) else max_memory_allocation_size;
    // suballocation_block_size = min(GGML_VK_SUBALLOCATION_BLOCK_SIZE or 1 GiB, max_memory_allocation_size)
    r.max_buffer = maxbuf ? maxbuf : maxalloc;
    size_t block = (size_t) 1 << 30;
    if (const char * b = getenv("GGML_VK_SUBALLOCATION_BLOCK_SIZE")) block = strtoull(b, nullptr, 10);
    r.max_size = std::min(block, maxalloc);
    r.arch = "align=" + std::to_string(r.align) + " max_size=" + std::to_string(r.max_size) +
             " maxbuf=" + std::to_string(r.max_buffer) + " maxrange=" + std::to_string(r.max_range) +
             " mapalign=" + std::to_string(r.host_align);
    return "";
}

// metal options: maxbuf= (maxBufferLength; default: the device's total)
std::string parse_metal(device_rules & r, const std::vector<std::string> & parts) {
    r.align = 32;  // ggml_backend_metal_buffer_type_shared_get_alignment
    r.max_size = r.total;
    for (size_t i = 2; i < parts.size(); i++) {
        bool ok = parts[i].rfind("maxbuf=", 0) == 0;
        const size_t v = ok ? parse_size(parts[i].substr(7), &ok) : 0;
        if (!ok) return "standin: unknown metal option '" + parts[i] + "'";
        r.max_size = v;
    }
    r.arch = "Apple7+ unified maxbuf=" + std::to_string(r.max_size);
    return "";
}

std::string parse_cuda(device_rules & r, const std::vector<std::string> & parts) {
    r.cc = 890;
    r.arch = "cc=89";
    for (size_t i = 2; i < parts.size(); i++) {
        if (parts[i].rfind("cc=", 0) != 0) return "standin: unknown cuda option '" + parts[i] + "'";
        r.cc = atoi(parts[i].c_str() + 3) * 10;
        r.arch = parts[i];
    }
    return "";
}

std::string parse_rocm(device_rules & r, const std::vector<std::string> & parts) {
    r.arch = "gfx1100";
    for (size_t i = 2; i < parts.size(); i++) {
        if (parts[i].rfind("arch=", 0) != 0) return "standin: unknown rocm option '" + parts[i] + "'";
        r.arch = parts[i].substr(5);
    }
    bool ok = false;
    r.cc = rocm_cc(r.arch, &ok);
    return ok ? "" : "standin: unknown AMD arch '" + r.arch + "'";
}

std::vector<std::string> split(const std::string & s, char sep) {
    std::vector<std::string> out;
    size_t p = 0;
    while (p <= s.size()) {
        size_t c = s.find(sep, p);
        out.push_back(s.substr(p, c == std::string::npos ? std::string::npos : c - p));
        p = c == std::string::npos ? s.size() + 1 : c + 1;
    }
    return out;
}

struct kind_names {
    const char * spec;
    kind         k;
    const char * prefix;  // device and buffer type names
    const char * reg;     // registry name
    const char * host;    // host buffer type name (Metal has none)
};

const kind_names KINDS[] = {
    {"cuda", kind::cuda, "CUDA", "CUDA", "CUDA_Host"},
    {"rocm", kind::rocm, "ROCm", "ROCm", "ROCm_Host"},
    {"vulkan", kind::vulkan, "Vulkan", "Vulkan", "Vulkan_Host"},  // GGML_VK_NAME
    {"metal", kind::metal, "MTL", "MTL", ""},                     // GGML_METAL_NAME
};

}  // namespace

std::string standin_create(const std::string & spec, ggml_backend_reg_t * out) {
    *out = nullptr;
    if (const char * mb = getenv("GGML_OP_OFFLOAD_MIN_BATCH")) {
        g_min_batch = atoi(mb);
    }
    auto reg_ctx = std::make_unique<standin_reg_ctx>();
    std::vector<device_rules> rules;
    const kind_names * names = nullptr;
    for (const std::string & one : split(spec, ',')) {
        if (one.empty()) continue;
        const std::vector<std::string> parts = split(one, ':');
        if (parts.size() < 2) return "standin: expected KIND:SIZE[:option...], got '" + one + "'";
        const kind_names * kn = nullptr;
        for (const auto & k : KINDS) {
            if (parts[0] == k.spec) kn = &k;
        }
        if (!kn) return "standin: unknown kind '" + parts[0] + "' (cuda, rocm, vulkan, metal)";
        if (names && names != kn) return "standin: one kind of device per run";
        names = kn;
        device_rules r{};
        r.k = kn->k;
        bool ok = false;
        r.total = parse_size(parts[1], &ok);
        if (!ok) return "standin: bad size '" + parts[1] + "'";
        std::string err;
        switch (r.k) {
            case kind::cuda: err = parse_cuda(r, parts); break;
            case kind::rocm: err = parse_rocm(r, parts); break;
            case kind::vulkan: err = parse_vulkan(r, parts); break;
            case kind::metal: err = parse_metal(r, parts); break;
        }
        if (!err.empty()) return err;
        r.name = kn->prefix + std::to_string(rules.size());
        r.desc = "stand-in " + parts[0] + " " + r.arch;
        rules.push_back(r);
    }
    if (rules.empty()) return "standin: no device";
    if (names->k == kind::metal && rules.size() > 1) return "standin: Metal has one device";
    reg_ctx->name = names->reg;
    reg_ctx->devices.resize(rules.size());
    auto * reg = new ggml_backend_reg{GGML_BACKEND_API_VERSION, {reg_name, reg_count, reg_device, reg_proc}, reg_ctx.get()};
    for (size_t i = 0; i < rules.size(); i++) {
        auto c = std::make_unique<standin_device_ctx>();
        c->rules = rules[i];
        c->index = (int) i;
        c->buft  = ggml_backend_buffer_type{dev_buft_iface, &reg_ctx->devices[i], c.get()};
        reg_ctx->devices[i] = ggml_backend_device{dev_iface, reg, c.get()};
        const bool cuda_like = rules[i].k == kind::cuda || rules[i].k == kind::rocm;
        g_describe += rules[i].name + " " + rules[i].desc + " total=" + std::to_string(rules[i].total) +
                      " align=" + std::to_string(rules[i].align) + (cuda_like ? " row_padding=512" : "") +
                      " offload_min_batch=" + std::to_string(g_min_batch) + "\n";
        reg_ctx->ctxs.push_back(std::move(c));
    }
    g_host_buft.device = &reg_ctx->devices[0];
    g_host_buft.context = (void *) names->host;
    if (names->k == kind::vulkan) {
        g_host_align = rules[0].host_align;  // vk_instance.devices[0]
        g_host_max_size = rules[0].max_size;
        g_host_extra = 32;
    }
    g_reg_objs.emplace_back(reg);
    g_regs.push_back(std::move(reg_ctx));
    *out = reg;
    return "";
}

std::string standin_register(const std::string & spec) {
    ggml_backend_reg_t reg = nullptr;
    const std::string err = standin_create(spec, &reg);
    if (err.empty()) {
        ggml_backend_register(reg);
    }
    return err;
}

std::string standin_describe() { return g_describe; }

std::string standin_allocations() { return allocations(); }
