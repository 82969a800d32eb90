"""gguf-py 0.19.0's tables that fitplan reads (`gguf.constants`), written by tools/gen_gguf_tables.py.

Importing `gguf.constants` builds a few hundred enums and tables, a tenth of the start of `fitplan plan`;
these are the metadata key names (`Keys`), the ggml types with their block and type sizes, and the file
types, as plain values. tests/gguf/test_gguf_tables.py checks the file against the installed gguf-py.
Do not edit: run the script.
"""

from __future__ import annotations

__all__ = ["FILE_TYPES", "GGML_TYPES", "GGMLQuantizationType", "Keys"]

#: (id, name, elements per block, bytes per block): `GGML_QUANT_SIZES` in its order, named by `GGMLQuantizationType`
GGML_TYPES: tuple[tuple[int, str, int, int], ...] = (
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 40),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
    (40, "NVFP4", 64, 36),
    (41, "Q1_0", 128, 18),
)

#: (value, name) of each `LlamaFileType`
FILE_TYPES: tuple[tuple[int, str], ...] = (
    (0, "ALL_F32"),
    (1, "MOSTLY_F16"),
    (2, "MOSTLY_Q4_0"),
    (3, "MOSTLY_Q4_1"),
    (7, "MOSTLY_Q8_0"),
    (8, "MOSTLY_Q5_0"),
    (9, "MOSTLY_Q5_1"),
    (10, "MOSTLY_Q2_K"),
    (11, "MOSTLY_Q3_K_S"),
    (12, "MOSTLY_Q3_K_M"),
    (13, "MOSTLY_Q3_K_L"),
    (14, "MOSTLY_Q4_K_S"),
    (15, "MOSTLY_Q4_K_M"),
    (16, "MOSTLY_Q5_K_S"),
    (17, "MOSTLY_Q5_K_M"),
    (18, "MOSTLY_Q6_K"),
    (19, "MOSTLY_IQ2_XXS"),
    (20, "MOSTLY_IQ2_XS"),
    (21, "MOSTLY_Q2_K_S"),
    (22, "MOSTLY_IQ3_XS"),
    (23, "MOSTLY_IQ3_XXS"),
    (24, "MOSTLY_IQ1_S"),
    (25, "MOSTLY_IQ4_NL"),
    (26, "MOSTLY_IQ3_S"),
    (27, "MOSTLY_IQ3_M"),
    (28, "MOSTLY_IQ2_S"),
    (29, "MOSTLY_IQ2_M"),
    (30, "MOSTLY_IQ4_XS"),
    (31, "MOSTLY_IQ1_M"),
    (32, "MOSTLY_BF16"),
    (36, "MOSTLY_TQ1_0"),
    (37, "MOSTLY_TQ2_0"),
    (38, "MOSTLY_MXFP4_MOE"),
    (39, "MOSTLY_NVFP4"),
    (40, "MOSTLY_Q1_0"),
    (1024, "GUESSED"),
)


class GGMLQuantizationType:
    """The ggml type ids by name (`gguf.constants.GGMLQuantizationType`), as ints."""

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41


class Keys:
    class General:
        TYPE = "general.type"
        ARCHITECTURE = "general.architecture"
        QUANTIZATION_VERSION = "general.quantization_version"
        ALIGNMENT = "general.alignment"
        FILE_TYPE = "general.file_type"
        SAMPLING_SEQUENCE = "general.sampling.sequence"
        SAMPLING_TOP_K = "general.sampling.top_k"
        SAMPLING_TOP_P = "general.sampling.top_p"
        SAMPLING_MIN_P = "general.sampling.min_p"
        SAMPLING_XTC_PROBABILITY = "general.sampling.xtc_probability"
        SAMPLING_XTC_THRESHOLD = "general.sampling.xtc_threshold"
        SAMPLING_TEMP = "general.sampling.temp"
        SAMPLING_PENALTY_LAST_N = "general.sampling.penalty_last_n"
        SAMPLING_PENALTY_REPEAT = "general.sampling.penalty_repeat"
        SAMPLING_MIROSTAT = "general.sampling.mirostat"
        SAMPLING_MIROSTAT_TAU = "general.sampling.mirostat_tau"
        SAMPLING_MIROSTAT_ETA = "general.sampling.mirostat_eta"
        NAME = "general.name"
        AUTHOR = "general.author"
        VERSION = "general.version"
        ORGANIZATION = "general.organization"
        FINETUNE = "general.finetune"
        BASENAME = "general.basename"
        DESCRIPTION = "general.description"
        QUANTIZED_BY = "general.quantized_by"
        SIZE_LABEL = "general.size_label"
        LICENSE = "general.license"
        LICENSE_NAME = "general.license.name"
        LICENSE_LINK = "general.license.link"
        URL = "general.url"
        DOI = "general.doi"
        UUID = "general.uuid"
        REPO_URL = "general.repo_url"
        SOURCE_URL = "general.source.url"
        SOURCE_DOI = "general.source.doi"
        SOURCE_UUID = "general.source.uuid"
        SOURCE_REPO_URL = "general.source.repo_url"
        BASE_MODEL_COUNT = "general.base_model.count"
        BASE_MODEL_NAME = "general.base_model.{id}.name"
        BASE_MODEL_AUTHOR = "general.base_model.{id}.author"
        BASE_MODEL_VERSION = "general.base_model.{id}.version"
        BASE_MODEL_ORGANIZATION = "general.base_model.{id}.organization"
        BASE_MODEL_DESCRIPTION = "general.base_model.{id}.description"
        BASE_MODEL_URL = "general.base_model.{id}.url"
        BASE_MODEL_DOI = "general.base_model.{id}.doi"
        BASE_MODEL_UUID = "general.base_model.{id}.uuid"
        BASE_MODEL_REPO_URL = "general.base_model.{id}.repo_url"
        DATASET_COUNT = "general.dataset.count"
        DATASET_NAME = "general.dataset.{id}.name"
        DATASET_AUTHOR = "general.dataset.{id}.author"
        DATASET_VERSION = "general.dataset.{id}.version"
        DATASET_ORGANIZATION = "general.dataset.{id}.organization"
        DATASET_DESCRIPTION = "general.dataset.{id}.description"
        DATASET_URL = "general.dataset.{id}.url"
        DATASET_DOI = "general.dataset.{id}.doi"
        DATASET_UUID = "general.dataset.{id}.uuid"
        DATASET_REPO_URL = "general.dataset.{id}.repo_url"
        TAGS = "general.tags"
        LANGUAGES = "general.languages"

    class LLM:
        VOCAB_SIZE = "{arch}.vocab_size"
        CONTEXT_LENGTH = "{arch}.context_length"
        EMBEDDING_LENGTH = "{arch}.embedding_length"
        EMBEDDING_LENGTH_OUT = "{arch}.embedding_length_out"
        FEATURES_LENGTH = "{arch}.features_length"
        BLOCK_COUNT = "{arch}.block_count"
        LEADING_DENSE_BLOCK_COUNT = "{arch}.leading_dense_block_count"
        FEED_FORWARD_LENGTH = "{arch}.feed_forward_length"
        EXPERT_FEED_FORWARD_LENGTH = "{arch}.expert_feed_forward_length"
        EXPERT_SHARED_FEED_FORWARD_LENGTH = "{arch}.expert_shared_feed_forward_length"
        EXPERT_CHUNK_FEED_FORWARD_LENGTH = "{arch}.expert_chunk_feed_forward_length"
        USE_PARALLEL_RESIDUAL = "{arch}.use_parallel_residual"
        TENSOR_DATA_LAYOUT = "{arch}.tensor_data_layout"
        EXPERT_COUNT = "{arch}.expert_count"
        EXPERT_USED_COUNT = "{arch}.expert_used_count"
        EXPERT_SHARED_COUNT = "{arch}.expert_shared_count"
        EXPERT_GROUP_COUNT = "{arch}.expert_group_count"
        EXPERT_GROUP_USED_COUNT = "{arch}.expert_group_used_count"
        EXPERT_WEIGHTS_SCALE = "{arch}.expert_weights_scale"
        EXPERT_WEIGHTS_NORM = "{arch}.expert_weights_norm"
        EXPERT_GATING_FUNC = "{arch}.expert_gating_func"
        EXPERT_GROUP_SCALE = "{arch}.expert_group_scale"
        EXPERTS_PER_GROUP = "{arch}.experts_per_group"
        MOE_EVERY_N_LAYERS = "{arch}.moe_every_n_layers"
        MOE_LATENT_SIZE = "{arch}.moe_latent_size"
        NEXTN_PREDICT_LAYERS = "{arch}.nextn_predict_layers"
        NUM_DEEPSTACK_LAYERS = "{arch}.n_deepstack_layers"
        POOLING_TYPE = "{arch}.pooling_type"
        LOGIT_SCALE = "{arch}.logit_scale"
        DECODER_START_TOKEN_ID = "{arch}.decoder_start_token_id"
        DECODER_BLOCK_COUNT = "{arch}.decoder_block_count"
        ATTN_LOGIT_SOFTCAPPING = "{arch}.attn_logit_softcapping"
        ROUTER_LOGIT_SOFTCAPPING = "{arch}.router_logit_softcapping"
        FINAL_LOGIT_SOFTCAPPING = "{arch}.final_logit_softcapping"
        SWIN_NORM = "{arch}.swin_norm"
        RESCALE_EVERY_N_LAYERS = "{arch}.rescale_every_n_layers"
        TIME_MIX_EXTRA_DIM = "{arch}.time_mix_extra_dim"
        TIME_DECAY_EXTRA_DIM = "{arch}.time_decay_extra_dim"
        RESIDUAL_SCALE = "{arch}.residual_scale"
        EMBEDDING_SCALE = "{arch}.embedding_scale"
        TOKEN_SHIFT_COUNT = "{arch}.token_shift_count"
        INTERLEAVE_MOE_LAYER_STEP = "{arch}.interleave_moe_layer_step"
        FULL_ATTENTION_INTERVAL = "{arch}.full_attention_interval"
        ACTIVATION_SPARSITY_SCALE = "{arch}.activation_sparsity_scale"
        ALTUP_ACTIVE_IDX = "{arch}.altup.active_idx"
        ALTUP_NUM_INPUTS = "{arch}.altup.num_inputs"
        EMBD_LENGTH_PER_LAYER_INP = "{arch}.embedding_length_per_layer_input"
        SWIGLU_CLAMP_EXP = "{arch}.swiglu_clamp_exp"
        SWIGLU_CLAMP_SHEXP = "{arch}.swiglu_clamp_shexp"
        DENSE_FEAT_IN_SIZE = "{arch}.{dense}_feat_in"
        DENSE_FEAT_OUT_SIZE = "{arch}.{dense}_feat_out"

    class Attention:
        HEAD_COUNT = "{arch}.attention.head_count"
        HEAD_COUNT_KV = "{arch}.attention.head_count_kv"
        MAX_ALIBI_BIAS = "{arch}.attention.max_alibi_bias"
        CLAMP_KQV = "{arch}.attention.clamp_kqv"
        KEY_LENGTH = "{arch}.attention.key_length"
        VALUE_LENGTH = "{arch}.attention.value_length"
        LAYERNORM_EPS = "{arch}.attention.layer_norm_epsilon"
        LAYERNORM_RMS_EPS = "{arch}.attention.layer_norm_rms_epsilon"
        GROUPNORM_EPS = "{arch}.attention.group_norm_epsilon"
        GROUPNORM_GROUPS = "{arch}.attention.group_norm_groups"
        CAUSAL = "{arch}.attention.causal"
        Q_LORA_RANK = "{arch}.attention.q_lora_rank"
        KV_LORA_RANK = "{arch}.attention.kv_lora_rank"
        DECAY_LORA_RANK = "{arch}.attention.decay_lora_rank"
        ICLR_LORA_RANK = "{arch}.attention.iclr_lora_rank"
        VALUE_RESIDUAL_MIX_LORA_RANK = "{arch}.attention.value_residual_mix_lora_rank"
        GATE_LORA_RANK = "{arch}.attention.gate_lora_rank"
        REL_BUCKETS_COUNT = "{arch}.attention.relative_buckets_count"
        SLIDING_WINDOW = "{arch}.attention.sliding_window"
        SCALE = "{arch}.attention.scale"
        OUTPUT_SCALE = "{arch}.attention.output_scale"
        TEMPERATURE_LENGTH = "{arch}.attention.temperature_length"
        KEY_LENGTH_MLA = "{arch}.attention.key_length_mla"
        VALUE_LENGTH_MLA = "{arch}.attention.value_length_mla"
        KEY_LENGTH_SWA = "{arch}.attention.key_length_swa"
        VALUE_LENGTH_SWA = "{arch}.attention.value_length_swa"
        SHARED_KV_LAYERS = "{arch}.attention.shared_kv_layers"
        SLIDING_WINDOW_PATTERN = "{arch}.attention.sliding_window_pattern"
        TEMPERATURE_SCALE = "{arch}.attention.temperature_scale"

        class Indexer:
            HEAD_COUNT = "{arch}.attention.indexer.head_count"
            KEY_LENGTH = "{arch}.attention.indexer.key_length"
            TOP_K = "{arch}.attention.indexer.top_k"

    class Rope:
        DIMENSION_COUNT = "{arch}.rope.dimension_count"
        DIMENSION_COUNT_SWA = "{arch}.rope.dimension_count_swa"
        DIMENSION_SECTIONS = "{arch}.rope.dimension_sections"
        FREQ_BASE = "{arch}.rope.freq_base"
        FREQ_BASE_SWA = "{arch}.rope.freq_base_swa"
        SCALING_TYPE = "{arch}.rope.scaling.type"
        SCALING_FACTOR = "{arch}.rope.scaling.factor"
        SCALING_ALPHA = "{arch}.rope.scaling.alpha"
        SCALING_ATTN_FACTOR = "{arch}.rope.scaling.attn_factor"
        SCALING_ORIG_CTX_LEN = "{arch}.rope.scaling.original_context_length"
        SCALING_FINETUNED = "{arch}.rope.scaling.finetuned"
        SCALING_YARN_LOG_MUL = "{arch}.rope.scaling.yarn_log_multiplier"
        SCALING_YARN_EXT_FACTOR = "{arch}.rope.scaling.yarn_ext_factor"
        SCALING_YARN_ATTN_FACTOR = "{arch}.rope.scaling.yarn_attn_factor"
        SCALING_YARN_BETA_FAST = "{arch}.rope.scaling.yarn_beta_fast"
        SCALING_YARN_BETA_SLOW = "{arch}.rope.scaling.yarn_beta_slow"

    class Split:
        LLM_KV_SPLIT_NO = "split.no"
        LLM_KV_SPLIT_COUNT = "split.count"
        LLM_KV_SPLIT_TENSORS_COUNT = "split.tensors.count"

    class SSM:
        CONV_KERNEL = "{arch}.ssm.conv_kernel"
        INNER_SIZE = "{arch}.ssm.inner_size"
        STATE_SIZE = "{arch}.ssm.state_size"
        TIME_STEP_RANK = "{arch}.ssm.time_step_rank"
        GROUP_COUNT = "{arch}.ssm.group_count"
        DT_B_C_RMS = "{arch}.ssm.dt_b_c_rms"

    class KDA:
        HEAD_DIM = "{arch}.kda.head_dim"

    class WKV:
        HEAD_SIZE = "{arch}.wkv.head_size"

    class PosNet:
        EMBEDDING_LENGTH = "{arch}.posnet.embedding_length"
        BLOCK_COUNT = "{arch}.posnet.block_count"

    class ConvNext:
        EMBEDDING_LENGTH = "{arch}.convnext.embedding_length"
        BLOCK_COUNT = "{arch}.convnext.block_count"

    class Classifier:
        OUTPUT_LABELS = "{arch}.classifier.output_labels"

    class ShortConv:
        L_CACHE = "{arch}.shortconv.l_cache"

    class Tokenizer:
        MODEL = "tokenizer.ggml.model"
        PRE = "tokenizer.ggml.pre"
        LIST = "tokenizer.ggml.tokens"
        TOKEN_TYPE = "tokenizer.ggml.token_type"
        TOKEN_TYPE_COUNT = "tokenizer.ggml.token_type_count"
        SCORES = "tokenizer.ggml.scores"
        MERGES = "tokenizer.ggml.merges"
        BOS_ID = "tokenizer.ggml.bos_token_id"
        EOS_ID = "tokenizer.ggml.eos_token_id"
        EOT_ID = "tokenizer.ggml.eot_token_id"
        EOM_ID = "tokenizer.ggml.eom_token_id"
        UNK_ID = "tokenizer.ggml.unknown_token_id"
        SEP_ID = "tokenizer.ggml.seperator_token_id"
        PAD_ID = "tokenizer.ggml.padding_token_id"
        MASK_ID = "tokenizer.ggml.mask_token_id"
        ADD_BOS = "tokenizer.ggml.add_bos_token"
        ADD_EOS = "tokenizer.ggml.add_eos_token"
        ADD_SEP = "tokenizer.ggml.add_sep_token"
        ADD_PREFIX = "tokenizer.ggml.add_space_prefix"
        REMOVE_EXTRA_WS = "tokenizer.ggml.remove_extra_whitespaces"
        PRECOMPILED_CHARSMAP = "tokenizer.ggml.precompiled_charsmap"
        HF_JSON = "tokenizer.huggingface.json"
        RWKV = "tokenizer.rwkv.world"
        CHAT_TEMPLATE = "tokenizer.chat_template"
        CHAT_TEMPLATE_N = "tokenizer.chat_template.{name}"
        CHAT_TEMPLATES = "tokenizer.chat_templates"
        FIM_PRE_ID = "tokenizer.ggml.fim_pre_token_id"
        FIM_SUF_ID = "tokenizer.ggml.fim_suf_token_id"
        FIM_MID_ID = "tokenizer.ggml.fim_mid_token_id"
        FIM_PAD_ID = "tokenizer.ggml.fim_pad_token_id"
        FIM_REP_ID = "tokenizer.ggml.fim_rep_token_id"
        FIM_SEP_ID = "tokenizer.ggml.fim_sep_token_id"
        PREFIX_ID = "tokenizer.ggml.prefix_token_id"
        SUFFIX_ID = "tokenizer.ggml.suffix_token_id"
        MIDDLE_ID = "tokenizer.ggml.middle_token_id"

    class Adapter:
        TYPE = "adapter.type"
        LORA_ALPHA = "adapter.lora.alpha"
        LORA_TASK_NAME = "adapter.lora.task_name"
        LORA_PROMPT_PREFIX = "adapter.lora.prompt_prefix"
        ALORA_INVOCATION_TOKENS = "adapter.alora.invocation_tokens"

    class IMatrix:
        CHUNK_COUNT = "imatrix.chunk_count"
        CHUNK_SIZE = "imatrix.chunk_size"
        DATASETS = "imatrix.datasets"

    class Clip:
        PROJECTOR_TYPE = "clip.projector_type"
        HAS_VISION_ENCODER = "clip.has_vision_encoder"
        HAS_AUDIO_ENCODER = "clip.has_audio_encoder"
        HAS_LLAVA_PROJECTOR = "clip.has_llava_projector"

    class ClipVision:
        PROJECTOR_TYPE = "clip.vision.projector_type"
        IMAGE_SIZE = "clip.vision.image_size"
        IMAGE_MIN_PIXELS = "clip.vision.image_min_pixels"
        IMAGE_MAX_PIXELS = "clip.vision.image_max_pixels"
        PREPROC_MIN_TILES = "clip.vision.preproc_min_tiles"
        PREPROC_MAX_TILES = "clip.vision.preproc_max_tiles"
        PREPROC_IMAGE_SIZE = "clip.vision.preproc_image_size"
        PATCH_SIZE = "clip.vision.patch_size"
        EMBEDDING_LENGTH = "clip.vision.embedding_length"
        FEED_FORWARD_LENGTH = "clip.vision.feed_forward_length"
        PROJECTION_DIM = "clip.vision.projection_dim"
        BLOCK_COUNT = "clip.vision.block_count"
        IMAGE_MEAN = "clip.vision.image_mean"
        IMAGE_STD = "clip.vision.image_std"
        SPATIAL_MERGE_SIZE = "clip.vision.spatial_merge_size"
        USE_GELU = "clip.use_gelu"
        USE_SILU = "clip.use_silu"
        N_WA_PATTERN = "clip.vision.n_wa_pattern"
        WA_LAYER_INDEXES = "clip.vision.wa_layer_indexes"
        IS_DEEPSTACK_LAYERS = "clip.vision.is_deepstack_layers"
        WINDOW_SIZE = "clip.vision.window_size"

        class Attention:
            HEAD_COUNT = "clip.vision.attention.head_count"
            LAYERNORM_EPS = "clip.vision.attention.layer_norm_epsilon"

        class Projector:
            SCALE_FACTOR = "clip.vision.projector.scale_factor"

        class SAM:
            BLOCK_COUNT = "clip.vision.sam.block_count"
            EMBEDDING_LENGTH = "clip.vision.sam.embedding_length"
            HEAD_COUNT = "clip.vision.sam.head_count"

    class ClipAudio:
        PROJECTOR_TYPE = "clip.audio.projector_type"
        NUM_MEL_BINS = "clip.audio.num_mel_bins"
        EMBEDDING_LENGTH = "clip.audio.embedding_length"
        FEED_FORWARD_LENGTH = "clip.audio.feed_forward_length"
        PROJECTION_DIM = "clip.audio.projection_dim"
        BLOCK_COUNT = "clip.audio.block_count"
        CHUNK_SIZE = "clip.audio.chunk_size"
        CONV_KERNEL_SIZE = "clip.audio.conv_kernel_size"
        MAX_POS_EMB = "clip.audio.max_pos_emb"

        class Attention:
            HEAD_COUNT = "clip.audio.attention.head_count"
            LAYERNORM_EPS = "clip.audio.attention.layer_norm_epsilon"

        class Projector:
            STACK_FACTOR = "clip.audio.projector.stack_factor"
            WINDOW_SIZE = "clip.audio.projector.window_size"
            DOWNSAMPLE_RATE = "clip.audio.projector.downsample_rate"
            HEAD_COUNT = "clip.audio.projector.head_count"

    class Diffusion:
        SHIFT_LOGITS = "diffusion.shift_logits"

    class xIELU:
        ALPHA_P = "xielu.alpha_p"
        ALPHA_N = "xielu.alpha_n"
        BETA = "xielu.beta"
        EPS = "xielu.eps"
