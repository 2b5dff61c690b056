/* Compiled as C (not C++): proves offgrid.h is a valid C header, and drives a model through it the way a C
 * program would. Called by capi_test.cpp. */
#include "offgrid.h"

#include <string.h>

/* Greedy generation of up to n tokens after `prompt`; writes the bytes (render_special 0) into out and returns
 * their count, or -1 on any failure (the message is offgrid_last_error()). */
long offgrid_c_generate(const char * model_path, const char * prompt, int n, char * out, size_t cap) {
    offgrid_model * model = NULL;
    offgrid_tokenizer * tok = NULL;
    offgrid_context * ctx = NULL;
    offgrid_sampler * sampler = NULL;
    long written = -1;
    int32_t ids[256];
    size_t n_ids = 0;
    offgrid_context_params cp = offgrid_context_default_params();
    offgrid_sampler_params sp = offgrid_sampler_default_params();
    sp.temperature = 0;
    if (offgrid_model_load(model_path, 0, &model) != OFFGRID_OK) goto done;
    if (offgrid_tokenizer_from_model(model, &tok) != OFFGRID_OK) goto done;
    if (offgrid_context_new(model, &cp, &ctx) != OFFGRID_OK) goto done;
    if (offgrid_sampler_new(&sp, &sampler) != OFFGRID_OK) goto done;
    if (offgrid_tokenize(tok, prompt, strlen(prompt), 1, 0, ids, 256, &n_ids) != OFFGRID_OK) goto done;
    if (offgrid_decode_tokens(ctx, ids, n_ids, 0) != OFFGRID_OK) goto done;
    for (size_t i = 0; i < n_ids; ++i) offgrid_sampler_accept(sampler, ids[i]);
    written = 0;
    for (int i = 0; i < n; ++i) {
        int32_t next = 0;
        size_t len = 0;
        if (offgrid_sampler_sample(sampler, ctx, -1, &next) != OFFGRID_OK) { written = -1; goto done; }
        offgrid_sampler_accept(sampler, next);
        if (offgrid_tokenizer_is_end_of_generation(tok, next)) break;
        if (offgrid_detokenize(tok, &next, 1, 0, out + written, cap - (size_t)written, &len) != OFFGRID_OK) {
            written = -1;
            goto done;
        }
        written += (long)len;
        if (i + 1 < n && offgrid_decode_tokens(ctx, &next, 1, 0) != OFFGRID_OK) { written = -1; goto done; }
    }
done:
    offgrid_sampler_free(sampler);
    offgrid_context_free(ctx);
    offgrid_tokenizer_free(tok);
    offgrid_model_free(model);
    return written;
}
