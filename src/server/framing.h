// The request framing the server accepts (RFC 9112 section 6), checked on the headers before the body is read:
// Content-Length must be one decimal number of at most 18 digits (repeated headers only with the same value);
// Transfer-Encoding may only be `chunked` (the one coding httplib decodes) and never together with a length (the
// request-smuggling shape behind a proxy). Header names compare in any case.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace offgrid::server {

struct FramingError {
    int status = 0;  // 0: fine; else 400 or 501, and the connection is closed
    std::string message;
};

FramingError check_framing(const std::vector<std::pair<std::string, std::string>> & headers);

}  // namespace offgrid::server
