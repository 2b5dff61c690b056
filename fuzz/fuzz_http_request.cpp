// libFuzzer target: bytes as one HTTP request's headers and body, through what the server does with them before
// a request reaches the scheduler: the framing check on the headers (check_framing), then the body's JSON
// (parse_body) and OpenAI's validation of /v1/completions and /v1/chat/completions (parse_generation) on a
// tokenizer of bytes with a small context, so every limit is reachable.
//
// Input: header lines ("Name: value", split at the first colon, the value's leading blanks dropped) up to the
// first empty line ("\r\n\r\n" or "\n\n"), then the body. Without an empty line the whole input is the body.
//
// The contract: no crash, no sanitizer report, and no exception but ApiError (a 4xx status, a message, a code);
// a framing refusal is 400 or 501 with a message, and a framing that passes is one the rules allow; a request
// that passes validation is one the scheduler can run: prompts not empty and shorter than a slot, token ids in
// the vocabulary, max_tokens >= 1 and within what the slot leaves, n choices per prompt, sampling values in
// their ranges, at most 4 stop strings (5 with the implicit chat one) and none empty, message ends ascending
// inside the prompt.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/byte_vocab.h"
#include "server/framing.h"
#include "server/protocol.h"

namespace {

using namespace offgrid::server;

constexpr uint32_t kCapacity = 96;

[[noreturn]] void violated(const char * what, const std::string & detail = {}) {
    std::fprintf(stderr, "contract violated: %s %s\n", what, detail.c_str());
    std::abort();
}

std::string lower(std::string s) {
    for (char & c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// The framing rules, stated independently of check_framing.
bool framing_allowed(const std::vector<std::pair<std::string, std::string>> & headers) {
    std::vector<std::string> lengths, codings;
    for (const auto & [n, v] : headers) {
        if (lower(n) == "content-length") lengths.push_back(v);
        if (lower(n) == "transfer-encoding") codings.push_back(v);
    }
    for (const auto & v : lengths) {
        if (v.empty() || v.size() > 18 || v != lengths[0]) return false;
        for (char c : v)
            if (c < '0' || c > '9') return false;
    }
    if (codings.size() > 1) return false;
    if (codings.size() == 1 && (lower(codings[0]) != "chunked" || !lengths.empty())) return false;
    return true;
}

void check_parsed(const ParsedRequest & pr, bool chat, int32_t n_vocab) {
    if (pr.n < 1 || pr.n > kMaxChoices) violated("n out of range");
    if (pr.prompts.empty() || (chat && pr.prompts.size() != 1)) violated("prompt count");
    if (pr.choices.size() != pr.prompts.size() * static_cast<size_t>(pr.n)) violated("choices != prompts x n");
    for (size_t i = 0; i < pr.choices.size(); ++i) {
        const GenRequest & g = pr.choices[i];
        if (g.index != static_cast<int32_t>(i)) violated("choice index");
        if (g.prompt.empty() || g.prompt.size() >= kCapacity) violated("prompt length", std::to_string(g.prompt.size()));
        for (const int32_t t : g.prompt)
            if (t < 0 || t >= n_vocab) violated("token id", std::to_string(t));
        if (g.max_tokens < 1 || g.prompt.size() + static_cast<size_t>(g.max_tokens) > kCapacity) violated("max_tokens");
        const auto & sp = g.sampling;
        if (!(sp.temperature >= 0 && sp.temperature <= 2) || !(sp.top_p >= 0 && sp.top_p <= 1) || sp.top_k < 0 ||
            !(sp.min_p >= 0 && sp.min_p <= 1) || !(sp.presence_penalty >= -2 && sp.presence_penalty <= 2) ||
            !(sp.frequency_penalty >= -2 && sp.frequency_penalty <= 2) || !(sp.repeat_penalty > 0))
            violated("sampling value out of range");
        if (g.stop.size() > kMaxStopStrings + (chat ? 1 : 0)) violated("stop count");
        for (const auto & s : g.stop)
            if (s.empty()) violated("empty stop string");
        if (g.top_logprobs > kMaxTopLogprobs) violated("top_logprobs");
        if (!chat && !g.message_ends.empty()) violated("message ends of a completion");
        for (size_t k = 0; k < g.message_ends.size(); ++k) {
            if (g.message_ends[k] == 0 || g.message_ends[k] >= g.prompt.size()) violated("message end outside the prompt");
            if (k > 0 && g.message_ends[k] <= g.message_ends[k - 1]) violated("message ends not ascending");
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    static const offgrid::Tokenizer tok(
        std::make_shared<const offgrid::runtime::Tokenizer>(offgrid::runtime::byte_vocab_tokenizer()));
    const std::string input(reinterpret_cast<const char *>(data), size);

    std::vector<std::pair<std::string, std::string>> headers;
    std::string body = input;
    size_t split = input.find("\r\n\r\n"), skip = 4;
    if (const size_t lf = input.find("\n\n"); lf != std::string::npos && (split == std::string::npos || lf < split)) {
        split = lf;
        skip = 2;
    }
    if (split != std::string::npos) {
        body = input.substr(split + skip);
        const std::string head = input.substr(0, split);
        size_t at = 0;
        while (at <= head.size()) {
            size_t end = head.find('\n', at);
            if (end == std::string::npos) end = head.size();
            std::string line = head.substr(at, end - at);
            if (!line.empty() && line.back() == '\r') line.pop_back();
            const size_t colon = line.find(':');
            if (colon != std::string::npos) {
                size_t v = colon + 1;
                while (v < line.size() && (line[v] == ' ' || line[v] == '\t')) ++v;
                headers.emplace_back(line.substr(0, colon), line.substr(v));
            }
            at = end + 1;
        }
    }

    const FramingError fe = check_framing(headers);
    if (fe.status != 0 && fe.status != 400 && fe.status != 501) violated("framing status", std::to_string(fe.status));
    if (fe.status != 0 && fe.message.empty()) violated("framing refusal without a message");
    if ((fe.status == 0) != framing_allowed(headers)) violated("framing decision differs from the rules");

    json j;
    try {
        j = parse_body(body);
    } catch (const ApiError & e) {
        if (e.status != 400 || e.code.empty() || std::string(e.what()).empty()) violated("body error shape");
        return 0;
    }
    const ParseLimits lim{"m", kCapacity, static_cast<int32_t>(tok.n_vocab()), ChatTemplate::ChatML};
    for (const bool chat : {false, true}) {
        try {
            const ParsedRequest pr = parse_generation(j, chat, tok, lim);
            check_parsed(pr, chat, lim.n_vocab);
        } catch (const ApiError & e) {
            if (e.status < 400 || e.status > 499 || e.code.empty() || std::string(e.what()).empty())
                violated("request error shape", std::to_string(e.status) + " " + e.code);
        }
    }
    return 0;
}
