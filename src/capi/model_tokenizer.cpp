// C entry points of models, tokenizers and chat rendering.
#include <cstring>

#include "capi/handles.h"
#include "offgrid/chat.h"

using offgrid::capi::copy_out;
using offgrid::capi::guard;
using offgrid::capi::require;
using offgrid::capi::StatusError;

extern "C" {

offgrid_status offgrid_model_load(const char * path, int weight_load, offgrid_model ** out) {
    return guard(OFFGRID_ERROR_FILE, [&] {
        require(path, "path");
        require(out, "out");
        if (weight_load < 0 || weight_load > 2) {
            throw StatusError(OFFGRID_ERROR_INVALID_ARGUMENT, "weight_load must be 0 (auto), 1 (map) or 2 (read)");
        }
        const offgrid::WeightLoad how = weight_load == 1   ? offgrid::WeightLoad::Map
                                        : weight_load == 2 ? offgrid::WeightLoad::Read
                                                           : offgrid::WeightLoad::Auto;
        auto handle = std::make_unique<offgrid_model>();
        handle->model = offgrid::Model::load(path, how);
        *out = handle.release();
    });
}

void offgrid_model_free(offgrid_model * model) { delete model; }

int32_t offgrid_model_n_vocab(const offgrid_model * model) { return model ? model->model->n_vocab() : -1; }
int32_t offgrid_model_n_embd(const offgrid_model * model) {
    return model ? static_cast<int32_t>(model->model->n_embd()) : -1;
}
int64_t offgrid_model_n_ctx_train(const offgrid_model * model) { return model ? model->model->n_ctx_train() : -1; }

offgrid_status offgrid_model_describe(const offgrid_model * model, char * buf, size_t cap, size_t * len) {
    return guard(OFFGRID_ERROR_FAILED, [&] {
        const std::string text = require(model, "model")->model->describe();
        if (len) *len = text.size();
        if (cap < text.size() + 1) {
            throw StatusError(OFFGRID_ERROR_BUFFER_TOO_SMALL, "describe needs " + std::to_string(text.size() + 1) + " bytes");
        }
        std::memcpy(require(buf, "buf"), text.c_str(), text.size() + 1);
    });
}

offgrid_status offgrid_tokenizer_from_model(const offgrid_model * model, offgrid_tokenizer ** out) {
    return guard(OFFGRID_ERROR_FILE, [&] {
        require(model, "model");
        require(out, "out");
        *out = new offgrid_tokenizer{model->model, offgrid::Tokenizer::from_model(*model->model)};
    });
}

void offgrid_tokenizer_free(offgrid_tokenizer * tok) { delete tok; }

int32_t offgrid_tokenizer_n_vocab(const offgrid_tokenizer * tok) { return tok ? tok->tok.n_vocab() : -1; }
int32_t offgrid_tokenizer_bos(const offgrid_tokenizer * tok) { return tok && tok->tok.bos() ? *tok->tok.bos() : -1; }
int32_t offgrid_tokenizer_eos(const offgrid_tokenizer * tok) { return tok && tok->tok.eos() ? *tok->tok.eos() : -1; }
int offgrid_tokenizer_add_bos(const offgrid_tokenizer * tok) { return tok && tok->tok.add_bos() ? 1 : 0; }
int offgrid_tokenizer_is_end_of_generation(const offgrid_tokenizer * tok, int32_t token) {
    return tok && tok->tok.is_end_of_generation(token) ? 1 : 0;
}

offgrid_status offgrid_tokenize(const offgrid_tokenizer * tok, const char * text, size_t len, int add_bos,
                                int parse_special, int32_t * tokens, size_t cap, size_t * n_tokens) {
    return guard(OFFGRID_ERROR_FAILED, [&] {
        require(tok, "tokenizer");
        if (len > 0) require(text, "text");
        const std::string_view view(text ? text : "", len);
        const std::vector<int32_t> ids = add_bos ? tok->tok.prompt(view, parse_special != 0)
                                                 : tok->tok.tokenize(view, parse_special != 0);
        copy_out(ids, tokens, cap, n_tokens);
    });
}

offgrid_status offgrid_detokenize(const offgrid_tokenizer * tok, const int32_t * tokens, size_t n_tokens,
                                  int render_special, char * buf, size_t cap, size_t * len) {
    // An id out of range is the caller's mistake, not the model's.
    return guard(OFFGRID_ERROR_INVALID_ARGUMENT, [&] {
        require(tok, "tokenizer");
        if (n_tokens > 0) require(tokens, "tokens");
        const std::string text = tok->tok.detokenize({tokens, n_tokens}, render_special != 0);
        copy_out(std::vector<char>(text.begin(), text.end()), buf, cap, len);
    });
}

size_t offgrid_utf8_complete_prefix(const char * bytes, size_t len) {
    if (!bytes) return 0;
    return offgrid::utf8_complete_prefix({bytes, len});
}

offgrid_status offgrid_chat_render(const offgrid_tokenizer * tok, const offgrid_chat_message * messages,
                                   size_t n_messages, int32_t * tokens, size_t cap, size_t * n_tokens) {
    return guard(OFFGRID_ERROR_FAILED, [&] {
        require(tok, "tokenizer");
        if (n_messages > 0) require(messages, "messages");
        std::vector<offgrid::ChatMessage> chat;
        for (size_t i = 0; i < n_messages; ++i) {
            const std::string which = "messages[" + std::to_string(i) + "]";
            chat.push_back({require(messages[i].role, (which + ".role").c_str()),
                            require(messages[i].content, (which + ".content").c_str())});
        }
        copy_out(offgrid::render_chatml(tok->tok, chat), tokens, cap, n_tokens);
    });
}

}  // extern "C"
