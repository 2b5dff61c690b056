// libFuzzer target: bytes as an assistant's reply through ToolCallParser (offgrid/chat.h), which the server runs on
// every chat reply of a request with tools: the model may write anything.
//
// Input: the first byte picks parallel_tool_calls (bit 0) and the cutting of the reply (the rest, a seed); the
// other bytes are the reply. The functions are "f", "g" and "get_weather".
//
// The contract: no crash, no sanitizer report, no exception; the same text and calls whether the reply is fed
// whole, byte by byte or in the seed's pieces; a reply without "<tool_call>" comes out as itself, byte for byte;
// the text is never longer than the reply; each call names one of the functions and its arguments are a compact
// JSON object; without parallel_tool_calls at most one call.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "offgrid/chat.h"

namespace {

[[noreturn]] void violated(const char * what, const std::string & detail = {}) {
    std::fprintf(stderr, "contract violated: %s %s\n", what, detail.c_str());
    std::abort();
}

struct Result {
    std::string text;
    std::vector<std::string> calls;  // name, then arguments
    bool operator==(const Result &) const = default;
};

const std::vector<std::string> kFunctions = {"f", "g", "get_weather"};

Result run(std::string_view reply, const std::vector<size_t> & cuts, bool parallel) {
    offgrid::ToolCallParser p(kFunctions, parallel);
    Result r;
    auto take = [&](const std::vector<offgrid::ToolCallParser::Event> & events) {
        for (const auto & e : events) {
            if (!e.call) {
                if (e.text.empty()) violated("an empty text event");
                r.text += e.text;
                continue;
            }
            r.calls.push_back(e.name);
            r.calls.push_back(e.arguments);
        }
    };
    size_t at = 0;
    for (const size_t c : cuts) {
        take(p.feed(reply.substr(at, c - at)));
        at = c;
    }
    take(p.feed(reply.substr(at)));
    take(p.finish());
    if (p.calls() * 2 != r.calls.size()) violated("calls() differs from the call events");
    return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    if (size == 0) return 0;
    const bool parallel = (data[0] & 1) != 0;
    const std::string_view reply(reinterpret_cast<const char *>(data + 1), size - 1);

    const Result whole = run(reply, {}, parallel);
    std::vector<size_t> bytes;
    for (size_t i = 1; i < reply.size(); ++i) bytes.push_back(i);
    if (run(reply, bytes, parallel) != whole) violated("byte-by-byte feeding differs from the whole reply");
    std::mt19937 rng(data[0] >> 1);
    std::vector<size_t> pieces;
    for (size_t at = 0; reply.size() > 1;) {
        at += 1 + rng() % 7;
        if (at >= reply.size()) break;
        pieces.push_back(at);
    }
    if (run(reply, pieces, parallel) != whole) violated("feeding in pieces differs from the whole reply");

    if (reply.find(offgrid::kToolCallOpen) == std::string_view::npos) {
        if (whole.text != reply || !whole.calls.empty()) violated("a reply without a block did not pass through");
    }
    if (whole.text.size() > reply.size()) violated("more text than the reply");
    if (!parallel && whole.calls.size() > 2) violated("several calls without parallel_tool_calls");
    for (size_t i = 0; i < whole.calls.size(); i += 2) {
        bool known = false;
        for (const auto & f : kFunctions) known = known || f == whole.calls[i];
        if (!known) violated("a call to an unknown function", whole.calls[i]);
        const auto args = nlohmann::ordered_json::parse(whole.calls[i + 1], nullptr, false);
        if (!args.is_object()) violated("arguments that are not a JSON object", whole.calls[i + 1]);
        if (args.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) != whole.calls[i + 1]) {
            violated("arguments not compact", whole.calls[i + 1]);
        }
    }
    return 0;
}
