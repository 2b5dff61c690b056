#include "server/embedder.h"

#include <bit>
#include <cmath>
#include <cstring>

namespace offgrid::server {

namespace {

[[noreturn]] void bad(const std::string & message, const std::string & param = "input", const std::string & code = "invalid_value") {
    throw ApiError(400, message, "invalid_request_error", param, code);
}

std::vector<int32_t> ids_of(const json & arr, int32_t n_vocab) {
    std::vector<int32_t> out;
    out.reserve(arr.size());
    for (const auto & t : arr) {
        if (!t.is_number_integer()) bad("'input' token ids must be integers", "input", "invalid_type");
        const int64_t v = t.is_number_unsigned() && t.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : t.get<int64_t>();
        if (v < 0 || v >= n_vocab) bad("token id " + std::to_string(v) + " is outside the vocabulary (0.." + std::to_string(n_vocab - 1) + ")");
        out.push_back(static_cast<int32_t>(v));
    }
    return out;
}

}  // namespace

EmbeddingRequest parse_embedding_request(const json & body, const Tokenizer & tok, const std::string & model_id,
                                         int32_t n_vocab, uint32_t n_embd, uint32_t capacity) {
    check_model(body, model_id);
    EmbeddingRequest r;
    auto it = body.find("input");
    if (it == body.end() || it->is_null()) bad("you must provide an 'input'", "input", "missing_required_parameter");
    const json & in = *it;
    // Strings are tokenised as completion prompts are (with the model's BOS when it asks for one).
    auto text = [&](const json & s) {
        std::vector<int32_t> ids;
        if (tok.add_bos() && tok.bos()) ids.push_back(*tok.bos());
        tok.tokenize(s.get<std::string>(), false, ids);
        return ids;
    };
    const char * shapes = "'input' must be a string, an array of strings, an array of token ids, or an array of arrays of token ids";
    if (in.is_string()) {
        if (in.get<std::string>().empty()) bad("'input' is an empty string");
        r.inputs.push_back(text(in));
    } else if (in.is_array() && !in.empty() && in[0].is_number()) {
        r.inputs.push_back(ids_of(in, n_vocab));
    } else if (in.is_array() && !in.empty()) {
        for (const auto & e : in) {
            if (e.is_string()) {
                if (e.get<std::string>().empty()) bad("'input' holds an empty string");
                r.inputs.push_back(text(e));
            } else if (e.is_array() && !e.empty() && !e[0].is_array()) {
                r.inputs.push_back(ids_of(e, n_vocab));
            } else {
                bad(shapes, "input", "invalid_type");
            }
        }
    } else {
        bad(std::string(shapes) + " (not empty)", "input", in.is_array() ? "invalid_value" : "invalid_type");
    }
    if (r.inputs.size() > kMaxEmbeddingInputs) bad("at most " + std::to_string(kMaxEmbeddingInputs) + " inputs per request");
    for (size_t i = 0; i < r.inputs.size(); ++i) {
        if (r.inputs[i].empty()) bad("input " + std::to_string(i) + " has no tokens");
        if (r.inputs[i].size() > capacity) {
            throw ApiError(400, "input " + std::to_string(i) + " is " + std::to_string(r.inputs[i].size()) +
                                    " tokens; this server embeds at most " + std::to_string(capacity) + " tokens per input",
                           "invalid_request_error", "input", "context_length_exceeded");
        }
    }
    auto fmt = body.find("encoding_format");
    if (fmt != body.end() && !fmt->is_null()) {
        if (!fmt->is_string() || (*fmt != "float" && *fmt != "base64")) {
            bad("'encoding_format' must be \"float\" or \"base64\"", "encoding_format");
        }
        r.base64 = *fmt == "base64";
    }
    // No truncation of the vectors: "dimensions" may only name the model's own width.
    auto dims = body.find("dimensions");
    if (dims != body.end() && !dims->is_null()) {
        if (!dims->is_number_integer() || dims->get<int64_t>() != static_cast<int64_t>(n_embd)) {
            bad("'dimensions' must be " + std::to_string(n_embd) + " (this model's embedding width) or absent", "dimensions");
        }
    }
    return r;
}

std::string base64_floats(const std::vector<float> & v) {
    static const char * abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::vector<unsigned char> bytes(v.size() * 4);
    for (size_t i = 0; i < v.size(); ++i) {
        const uint32_t u = std::bit_cast<uint32_t>(v[i]);
        for (int b = 0; b < 4; ++b) bytes[i * 4 + static_cast<size_t>(b)] = static_cast<unsigned char>(u >> (8 * b));  // little-endian
    }
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    for (size_t i = 0; i < bytes.size(); i += 3) {
        const size_t n = std::min<size_t>(3, bytes.size() - i);
        uint32_t w = static_cast<uint32_t>(bytes[i]) << 16;
        if (n > 1) w |= static_cast<uint32_t>(bytes[i + 1]) << 8;
        if (n > 2) w |= bytes[i + 2];
        out += abc[(w >> 18) & 63];
        out += abc[(w >> 12) & 63];
        out += n > 1 ? abc[(w >> 6) & 63] : '=';
        out += n > 2 ? abc[w & 63] : '=';
    }
    return out;
}

Embedder::Embedder(std::shared_ptr<const Model> model, uint32_t n_ctx, int n_threads)
    : model_(std::move(model)), n_ctx_(n_ctx), n_threads_(n_threads) {}

std::vector<std::vector<float>> Embedder::embed(const std::vector<std::vector<int32_t>> & inputs) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ctx_) {
        ContextParams p;
        p.n_ctx = n_ctx_;
        p.n_batch = n_ctx_;  // Context::embed takes at most n_batch tokens: one input is one decode call
        p.n_seq_max = 1;
        p.n_threads = n_threads_;
        p.embeddings = true;
        p.pooling = Pooling::Mean;
        ctx_ = std::make_unique<Context>(model_, p);
    }
    std::vector<std::vector<float>> out;
    out.reserve(inputs.size());
    for (const auto & ids : inputs) {
        std::vector<float> v = ctx_->embed(ids, 0);
        double ss = 0;
        for (const float x : v) ss += static_cast<double>(x) * x;
        if (ss > 0) {
            const float inv = static_cast<float>(1.0 / std::sqrt(ss));
            for (float & x : v) x *= inv;
        }
        out.push_back(std::move(v));
    }
    return out;
}

}  // namespace offgrid::server
