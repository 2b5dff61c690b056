// The server's API key check. The key is kept only as its SHA-256 digest; a request's bearer token is hashed and
// the two 32-byte digests are compared with a loop that always reads every byte, so the time of a check does
// not depend on where (or whether) the token differs from the key, nor on the key's length.
// The scheme of the Authorization header is matched case-insensitively (RFC 9110: "Bearer", "bearer", ...).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace offgrid::server {

using Sha256 = std::array<uint8_t, 32>;
Sha256 sha256(std::string_view data);

class ApiKey {
public:
    ApiKey() = default;                // no key: every request passes
    explicit ApiKey(std::string_view key);  // key must not be empty
    bool enabled() const { return enabled_; }
    // Whether an Authorization header value carries the key ("Bearer KEY", any case of the scheme).
    bool accepts(std::string_view authorization) const;

private:
    bool enabled_ = false;
    Sha256 digest_{};
};

}  // namespace offgrid::server
