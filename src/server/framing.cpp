#include "server/framing.h"

#include <algorithm>
#include <cctype>

namespace offgrid::server {

namespace {

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

bool all_digits(const std::string & v) {
    return !v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

FramingError check_framing(const std::vector<std::pair<std::string, std::string>> & headers) {
    std::vector<const std::string *> lengths, codings;
    for (const auto & [name, value] : headers) {
        const std::string n = lower(name);
        if (n == "content-length") lengths.push_back(&value);
        else if (n == "transfer-encoding") codings.push_back(&value);
    }
    for (const std::string * v : lengths) {
        if (!all_digits(*v) || v->size() > 18) return {400, "invalid Content-Length: not a decimal number of at most 18 digits"};
        if (*v != *lengths[0]) return {400, "conflicting Content-Length headers"};
    }
    if (!codings.empty()) {
        if (codings.size() > 1 || lower(*codings[0]) != "chunked") return {501, "unsupported Transfer-Encoding (only chunked)"};
        if (!lengths.empty()) return {400, "both Transfer-Encoding and Content-Length"};
    }
    return {};
}

}  // namespace offgrid::server
