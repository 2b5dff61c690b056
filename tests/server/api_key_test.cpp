// The API key check without a server: SHA-256 against the standard's test vectors, the scheme in any case, and
// tokens that differ anywhere (or only in length) refused.
#include <gtest/gtest.h>

#include <cstdio>

#include "server/api_key.h"

namespace offgrid::server {
namespace {

std::string hex(const Sha256 & d) {
    std::string out;
    char buf[3];
    for (const uint8_t b : d) {
        std::snprintf(buf, sizeof(buf), "%02x", b);
        out += buf;
    }
    return out;
}

// FIPS 180-2 examples and the empty string; the 56-byte message needs the second padding block.
TEST(ApiKey, Sha256KnownValues) {
    EXPECT_EQ(hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    EXPECT_EQ(hex(sha256(std::string(1000000, 'a'))), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(ApiKey, SchemeInAnyCaseTokenExactly) {
    const ApiKey key("s3cret-key");
    EXPECT_TRUE(key.enabled());
    EXPECT_TRUE(key.accepts("Bearer s3cret-key"));
    EXPECT_TRUE(key.accepts("bearer s3cret-key"));
    EXPECT_TRUE(key.accepts("BEARER  s3cret-key"));
    for (const char * bad : {"", "Bearer", "Bearer ", "s3cret-key", "Basic s3cret-key", "Bearers3cret-key",
                             "Bearer s3cret-kez", "Bearer S3cret-key", "Bearer s3cret-ke", "Bearer s3cret-key2",
                             "Bearer s3cret-key ", "Token s3cret-key"}) {
        EXPECT_FALSE(key.accepts(bad)) << bad;
    }
    EXPECT_TRUE(ApiKey().accepts(""));  // no key configured
    EXPECT_FALSE(ApiKey().enabled());
}

}  // namespace
}  // namespace offgrid::server
