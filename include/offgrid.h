/* offgrid's C interface: load a GGUF model, tokenize, decode, sample, embed, save and restore state.
 * Built as liboffgrid.so (CMake target offgrid_capi); the Python package (python/offgrid) binds it with ctypes.
 *
 * Handles. Every object is an opaque pointer made by a *_new / *_load / *_from_* call and released by its
 * *_free (which accepts NULL). A context and a tokenizer keep their model alive: the model handle may be freed
 * before them.
 *
 * Errors. Calls that can fail return an offgrid_status; OFFGRID_OK is 0. On failure the calling thread's last
 * error message (offgrid_last_error) says what is wrong and where, and output arguments are untouched unless
 * the call says otherwise. No C++ exception ever crosses this interface: every entry point catches.
 *
 * Thread safety. A model and a tokenizer are immutable: any threads may use them at once. A context and a
 * sampler are not: one thread at a time per handle. The last-error message is per thread.
 *
 * Sizes. Calls that fill a caller's buffer take its capacity and report the needed size through an out
 * argument; when the capacity is too small they return OFFGRID_ERROR_BUFFER_TOO_SMALL, fill nothing, and the
 * caller retries with the reported size.
 */
#ifndef OFFGRID_H
#define OFFGRID_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define OFFGRID_API __attribute__((visibility("default")))
#else
#define OFFGRID_API
#endif

typedef enum offgrid_status {
    OFFGRID_OK = 0,
    OFFGRID_ERROR_INVALID_ARGUMENT = 1, /* a NULL handle, a bad parameter, an id out of range */
    OFFGRID_ERROR_FILE = 2,             /* a file could not be read or written, or is malformed */
    OFFGRID_ERROR_NO_SPACE = 3,         /* decode: no cells for the batch (memory unchanged) */
    OFFGRID_ERROR_INVALID_BATCH = 4,    /* decode: the batch breaks a rule (memory unchanged) */
    OFFGRID_ERROR_ABORTED = 5,          /* decode: stopped by the abort callback (memory unchanged) */
    OFFGRID_ERROR_FAILED = 6,           /* the model or the memory refused the request */
    OFFGRID_ERROR_BUFFER_TOO_SMALL = 7, /* retry with the size reported */
    OFFGRID_ERROR_OUT_OF_MEMORY = 8,
    OFFGRID_ERROR_INTERNAL = 9          /* anything else (a bug: please report the message) */
} offgrid_status;

typedef struct offgrid_model offgrid_model;
typedef struct offgrid_tokenizer offgrid_tokenizer;
typedef struct offgrid_context offgrid_context;
typedef struct offgrid_sampler offgrid_sampler;

/* The message of the last failed call on this thread ("" when none); valid until the thread's next failing
 * call. offgrid_clear_error empties it. */
OFFGRID_API const char * offgrid_last_error(void);
OFFGRID_API void offgrid_clear_error(void);
OFFGRID_API const char * offgrid_status_name(offgrid_status status); /* "ok", "invalid argument", ... */
OFFGRID_API const char * offgrid_version(void);                      /* e.g. "0.1.0" */
/* The kernel level in use ("scalar", "avx2", "avx512", "amx", "neon", "neondot"). */
OFFGRID_API const char * offgrid_isa(void);
/* How the quantised weights multiply, for the whole process: "int16" (the default), "int8" (the speed path:
 * ggml's 8-bit arithmetic, prompts on the tile unit where the CPU has AMX) or "f32" (exact); docs/kernels.md.
 * Before the first model: INVALID_ARGUMENT for an unknown name, FAILED when another mode is already in effect. */
OFFGRID_API offgrid_status offgrid_set_activation_mode(const char * mode);
OFFGRID_API const char * offgrid_activation_mode(void);
/* The q4_K experts' matrices held in 16-row groups at load (a copy: those weights take their memory twice), so that
 * with "int8" on AVX-512 VNNI a decode step's expert products keep 16 rows in a register's lanes; the same results.
 * Off by default; set before loading a model (on != 0). offgrid_expert_rows16: 1 when set and in effect here. */
OFFGRID_API void offgrid_set_expert_rows16(int on);
OFFGRID_API int offgrid_expert_rows16(void);

/* ------------------------------------------------------------------ model */

/* weight_load: 0 auto (read into memory when it takes at most half of the available memory, else map),
 * 1 map the file, 2 read it into memory. */
OFFGRID_API offgrid_status offgrid_model_load(const char * path, int weight_load, offgrid_model ** out);
OFFGRID_API void offgrid_model_free(offgrid_model * model);
OFFGRID_API int32_t offgrid_model_n_vocab(const offgrid_model * model);    /* -1 for NULL */
OFFGRID_API int32_t offgrid_model_n_embd(const offgrid_model * model);     /* -1 for NULL */
OFFGRID_API int64_t offgrid_model_n_ctx_train(const offgrid_model * model); /* -1 for NULL */
/* One line: architecture, sizes, sparse-attention settings. NUL-terminated; *len excludes the NUL. */
OFFGRID_API offgrid_status offgrid_model_describe(const offgrid_model * model, char * buf, size_t cap, size_t * len);

/* ------------------------------------------------------------------ tokenizer */

OFFGRID_API offgrid_status offgrid_tokenizer_from_model(const offgrid_model * model, offgrid_tokenizer ** out);
OFFGRID_API void offgrid_tokenizer_free(offgrid_tokenizer * tok);
OFFGRID_API int32_t offgrid_tokenizer_n_vocab(const offgrid_tokenizer * tok);
OFFGRID_API int32_t offgrid_tokenizer_bos(const offgrid_tokenizer * tok); /* -1 when none */
OFFGRID_API int32_t offgrid_tokenizer_eos(const offgrid_tokenizer * tok); /* -1 when none */
/* 1 when a generation prompt starts with BOS, else 0. */
OFFGRID_API int offgrid_tokenizer_add_bos(const offgrid_tokenizer * tok);
/* 1 when `token` ends a generation (eos, <|im_end|>, <|endoftext|>, ...), else 0. */
OFFGRID_API int offgrid_tokenizer_is_end_of_generation(const offgrid_tokenizer * tok, int32_t token);

/* The tokens of text[0, len) (UTF-8 or any bytes). add_bos: put BOS first when the tokenizer asks for it (a
 * generation prompt). parse_special: control tokens written in the text become those tokens. */
OFFGRID_API offgrid_status offgrid_tokenize(const offgrid_tokenizer * tok, const char * text, size_t len, int add_bos,
                                            int parse_special, int32_t * tokens, size_t cap, size_t * n_tokens);
/* The bytes of the tokens (not NUL-terminated; may end inside a UTF-8 sequence). render_special 0: control
 * tokens give nothing. */
OFFGRID_API offgrid_status offgrid_detokenize(const offgrid_tokenizer * tok, const int32_t * tokens, size_t n_tokens,
                                              int render_special, char * buf, size_t cap, size_t * len);
/* Length of the longest prefix of bytes[0, len) that does not end inside an unfinished UTF-8 sequence. */
OFFGRID_API size_t offgrid_utf8_complete_prefix(const char * bytes, size_t len);

typedef struct offgrid_chat_message {
    const char * role; /* system, developer, user, assistant, tool */
    const char * content;
} offgrid_chat_message;

/* The ChatML prompt tokens of a conversation, ending with the assistant's turn opened. */
OFFGRID_API offgrid_status offgrid_chat_render(const offgrid_tokenizer * tok, const offgrid_chat_message * messages,
                                               size_t n_messages, int32_t * tokens, size_t cap, size_t * n_tokens);

/* ------------------------------------------------------------------ context */

typedef struct offgrid_context_params {
    uint32_t n_ctx;     /* cells; 0: the model's context length (capped to half the available memory) */
    uint32_t n_batch;   /* most tokens per decode call; 0: n_ctx */
    uint32_t n_ubatch;  /* most tokens per micro-batch */
    uint32_t n_seq_max; /* sequence ids 0 .. n_seq_max-1 */
    int32_t n_threads;  /* 1 .. 256 */
    int32_t embeddings; /* 1: compute embeddings (offgrid_embed) */
    int32_t pooling;    /* with embeddings: 0 none, 1 mean, 2 last, 3 cls (first) */
    const char * type_k; /* "f16", "f32" or "q8_0"; NULL: f16 */
    const char * type_v; /* "f16", "f32" or "q8_0"; NULL: f16 */
} offgrid_context_params;

OFFGRID_API offgrid_context_params offgrid_context_default_params(void);
OFFGRID_API offgrid_status offgrid_context_new(const offgrid_model * model, const offgrid_context_params * params,
                                               offgrid_context ** out);
OFFGRID_API void offgrid_context_free(offgrid_context * ctx);
/* The parameters after rounding and clamping (NULL ctx: the defaults). type_k / type_v stay valid while ctx lives. */
OFFGRID_API offgrid_context_params offgrid_context_params_of(const offgrid_context * ctx);

typedef struct offgrid_batch_token {
    int32_t token;
    int32_t pos;    /* < 0: the next position of its sequence */
    int32_t seq;
    int32_t output; /* 1: keep this token's logits (and embedding) */
} offgrid_batch_token;

/* One decode call. On any status but OK the memory is as it was before the call. */
OFFGRID_API offgrid_status offgrid_decode(offgrid_context * ctx, const offgrid_batch_token * batch, size_t n);
/* Appends tokens to sequence `seq` at its next positions, keeping the logits of the last one only. */
OFFGRID_API offgrid_status offgrid_decode_tokens(offgrid_context * ctx, const int32_t * tokens, size_t n, int32_t seq);
/* Output rows of the last decode call, in batch order. */
OFFGRID_API int32_t offgrid_n_outputs(const offgrid_context * ctx);
/* Row i (negative: the last row) of n_vocab logits; NULL (and the last error set) when out of range. Valid
 * until the next call that changes the context. */
OFFGRID_API const float * offgrid_logits(const offgrid_context * ctx, int32_t i);

/* One text's embedding: decodes `tokens` into the empty sequence `seq`, pools them (the context's pooling; none
 * counts as mean), removes the sequence again. Needs embeddings = 1. out must hold n_embd floats. normalize 1:
 * scale to unit L2 norm (a zero vector stays zero). */
OFFGRID_API offgrid_status offgrid_embed(offgrid_context * ctx, const int32_t * tokens, size_t n, int32_t seq,
                                         int normalize, float * out, size_t cap);

/* Sequence edits; positions [p0, p1), p0 < 0 from the start, p1 < 0 to the end. seq_rm of a whole sequence
 * always works; a partial removal is refused (OFFGRID_ERROR_FAILED, nothing changed) beyond the rollback
 * snapshots of a recurrent model. seq_cp copies whole sequences. */
OFFGRID_API offgrid_status offgrid_seq_rm(offgrid_context * ctx, int32_t seq, int32_t p0, int32_t p1);
OFFGRID_API offgrid_status offgrid_seq_cp(offgrid_context * ctx, int32_t src, int32_t dst, int32_t p0, int32_t p1);
OFFGRID_API int32_t offgrid_seq_pos_max(const offgrid_context * ctx, int32_t seq); /* -1 when empty */
OFFGRID_API void offgrid_clear(offgrid_context * ctx);

/* State files: the context (seq < 0) or one sequence, with the token list a caller wants back on load. A file
 * made for another model is refused. */
OFFGRID_API offgrid_status offgrid_state_save_file(const offgrid_context * ctx, const char * path, int32_t seq,
                                                   const int32_t * tokens, size_t n_tokens);
/* On OK, *tokens is a new array of *n_tokens ids (free it with offgrid_tokens_free; NULL when empty). A failed
 * load leaves the memory consistent, the target sequence dropped. */
OFFGRID_API offgrid_status offgrid_state_load_file(offgrid_context * ctx, const char * path, int32_t seq,
                                                   int32_t ** tokens, size_t * n_tokens);
OFFGRID_API void offgrid_tokens_free(int32_t * tokens);

/* ------------------------------------------------------------------ sampler */

typedef struct offgrid_sampler_params {
    float temperature;       /* <= 0: greedy */
    int32_t top_k;           /* 0: off */
    float top_p;             /* 1: off; in (0, 1] */
    float min_p;             /* 0: off; in [0, 1] */
    float repeat_penalty;    /* 1: off; > 0 */
    float frequency_penalty;
    float presence_penalty;
    int32_t repeat_last_n;   /* 0: off, -1: the whole history */
    uint64_t seed;
} offgrid_sampler_params;

OFFGRID_API offgrid_sampler_params offgrid_sampler_default_params(void);
OFFGRID_API offgrid_status offgrid_sampler_new(const offgrid_sampler_params * params, offgrid_sampler ** out);
OFFGRID_API void offgrid_sampler_free(offgrid_sampler * sampler);
/* Draws from output row i (negative: the last row) of the context's last decode call. Does not accept it. */
OFFGRID_API offgrid_status offgrid_sampler_sample(offgrid_sampler * sampler, const offgrid_context * ctx, int32_t i,
                                                  int32_t * token);
OFFGRID_API offgrid_status offgrid_sampler_sample_logits(offgrid_sampler * sampler, const float * logits, size_t n,
                                                         int32_t * token);
/* Records the token actually used (sampled or forced), for the penalties. */
OFFGRID_API void offgrid_sampler_accept(offgrid_sampler * sampler, int32_t token);
OFFGRID_API void offgrid_sampler_reset(offgrid_sampler * sampler);

#ifdef __cplusplus
}
#endif

#endif /* OFFGRID_H */
