// /v1/embeddings on a real `offgrid serve` with the tiny model: OpenAI's response shape, unit-norm rows, equality
// with the in-process mean-pooled Context::embed of the same tokens, base64 encoding, and bad inputs as 400s.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "offgrid/context.h"
#include "server_helpers.h"

namespace offgrid::test {
namespace {

// One slot of 256 cells: inputs of at most 256 tokens.
const std::vector<std::string> kArgs = {"-np", "1", "-c", "256", "-b", "64", "-t", "1", "--quiet"};

json request(const json & input) { return {{"model", "tiny"}, {"input", input}}; }

std::vector<float> row(const json & reply, size_t i) {
    std::vector<float> v;
    for (const auto & x : reply["data"][i]["embedding"]) v.push_back(x.get<float>());
    return v;
}

double norm(const std::vector<float> & v) {
    double ss = 0;
    for (const float x : v) ss += static_cast<double>(x) * x;
    return std::sqrt(ss);
}

// Decodes standard base64 (with padding) into bytes.
std::vector<unsigned char> unbase64(const std::string & s) {
    auto val = [](char c) -> int {
        if (c >= 'A' && c <= 'Z') return c - 'A';
        if (c >= 'a' && c <= 'z') return c - 'a' + 26;
        if (c >= '0' && c <= '9') return c - '0' + 52;
        if (c == '+') return 62;
        if (c == '/') return 63;
        return -1;
    };
    std::vector<unsigned char> out;
    uint32_t acc = 0;
    int bits = 0;
    for (const char c : s) {
        if (c == '=') break;
        const int v = val(c);
        EXPECT_GE(v, 0) << "not base64: " << c;
        if (v < 0) return {};
        acc = (acc << 6) | static_cast<uint32_t>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out.push_back(static_cast<unsigned char>((acc >> bits) & 0xff));
        }
    }
    return out;
}

TEST(ServerEmbeddings, ShapesNormsDeterminismAndInProcessEquality) {
    auto model = Model::load((work_dir() / "tiny.gguf").string());
    const size_t n_embd = model->n_embd();
    ServerProcess s(kArgs);

    Reply one = post(s, "/v1/embeddings", request("The cabin stands in the woods"));
    ASSERT_EQ(one.status, 200) << one.body;
    EXPECT_EQ(one.j["object"], "list");
    EXPECT_EQ(one.j["model"], "tiny");
    ASSERT_EQ(one.j["data"].size(), 1u);
    EXPECT_EQ(one.j["data"][0]["object"], "embedding");
    EXPECT_EQ(one.j["data"][0]["index"], 0);

    Reply two = post(s, "/v1/embeddings", request(json::array({"The cabin stands in the woods", "A river runs by"})));
    ASSERT_EQ(two.status, 200) << two.body;
    ASSERT_EQ(two.j["data"].size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(two.j["data"][i]["index"], i);
        const auto v = row(two.j, i);
        ASSERT_EQ(v.size(), n_embd);
        EXPECT_NEAR(norm(v), 1.0, 1e-5);
    }
    // The same text gives the same vector, alone or next to another input; different texts differ.
    EXPECT_EQ(row(one.j, 0), row(two.j, 0));
    EXPECT_NE(row(two.j, 0), row(two.j, 1));
    Reply again = post(s, "/v1/embeddings", request("The cabin stands in the woods"));
    ASSERT_EQ(again.status, 200);
    EXPECT_EQ(row(again.j, 0), row(one.j, 0));

    // usage counts the tokens the server embedded: the same as /tokenize with the special tokens.
    Reply t0 = post(s, "/tokenize", json{{"content", "The cabin stands in the woods"}, {"add_special", true}});
    Reply t1 = post(s, "/tokenize", json{{"content", "A river runs by"}, {"add_special", true}});
    ASSERT_EQ(t0.status, 200);
    const auto ids0 = t0.j["tokens"].get<std::vector<int32_t>>();
    const auto ids1 = t1.j["tokens"].get<std::vector<int32_t>>();
    EXPECT_EQ(two.j["usage"]["prompt_tokens"], ids0.size() + ids1.size());
    EXPECT_EQ(two.j["usage"]["total_tokens"], ids0.size() + ids1.size());

    // Token ids (one array, or an array of arrays) embed as the text they came from.
    Reply ids = post(s, "/v1/embeddings", request(json::array({t0.j["tokens"], t1.j["tokens"]})));
    ASSERT_EQ(ids.status, 200) << ids.body;
    EXPECT_EQ(row(ids.j, 0), row(two.j, 0));
    EXPECT_EQ(row(ids.j, 1), row(two.j, 1));
    Reply flat = post(s, "/v1/embeddings", request(t1.j["tokens"]));
    ASSERT_EQ(flat.status, 200) << flat.body;
    EXPECT_EQ(row(flat.j, 0), row(two.j, 1));

    // In-process: the mean-pooled Context::embed of the same tokens, L2-normalised here.
    ContextParams p;
    p.n_ctx = 256;
    p.embeddings = true;
    p.pooling = Pooling::Mean;
    Context ctx(model, p);
    for (size_t k = 0; k < 2; ++k) {
        std::vector<float> ref = ctx.embed(k == 0 ? ids0 : ids1);
        ASSERT_EQ(ref.size(), n_embd);
        const double n = norm(ref);
        ASSERT_GT(n, 0);
        const auto got = row(two.j, k);
        float max_diff = 0;
        for (size_t i = 0; i < n_embd; ++i) max_diff = std::max(max_diff, std::fabs(got[i] - static_cast<float>(ref[i] / n)));
        EXPECT_LE(max_diff, 1e-5f) << "input " << k;
    }

    // base64: little-endian f32 bytes of the same floats.
    json b = request(json::array({"The cabin stands in the woods", "A river runs by"}));
    b["encoding_format"] = "base64";
    Reply b64 = post(s, "/v1/embeddings", b);
    ASSERT_EQ(b64.status, 200) << b64.body;
    for (size_t k = 0; k < 2; ++k) {
        ASSERT_TRUE(b64.j["data"][k]["embedding"].is_string());
        const auto bytes = unbase64(b64.j["data"][k]["embedding"].get<std::string>());
        ASSERT_EQ(bytes.size(), n_embd * 4);
        std::vector<float> v(n_embd);
        for (size_t i = 0; i < n_embd; ++i) {
            const uint32_t u = static_cast<uint32_t>(bytes[4 * i]) | static_cast<uint32_t>(bytes[4 * i + 1]) << 8 |
                               static_cast<uint32_t>(bytes[4 * i + 2]) << 16 | static_cast<uint32_t>(bytes[4 * i + 3]) << 24;
            std::memcpy(&v[i], &u, 4);
        }
        EXPECT_EQ(v, row(two.j, k));
    }
    EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(ServerEmbeddings, BadInputsAre400WithTheErrorObject) {
    ServerProcess s(kArgs);
    auto expect_400 = [&](const json & body, const std::string & code) {
        Reply r = post(s, "/v1/embeddings", body);
        EXPECT_EQ(r.status, 400) << body.dump() << " -> " << r.body;
        ASSERT_TRUE(r.j.is_object()) << r.body;
        EXPECT_TRUE(r.j["error"]["message"].is_string()) << r.body;
        EXPECT_EQ(r.j["error"]["type"], "invalid_request_error") << r.body;
        if (!code.empty()) {
            EXPECT_EQ(r.j["error"]["code"], code) << r.body;
        }
    };
    expect_400(json{{"model", "tiny"}}, "missing_required_parameter");
    expect_400(request(""), "");
    expect_400(request(json::array()), "");
    expect_400(request(json::array({""})), "");
    expect_400(request(json::array({json::array()})), "");
    expect_400(request(42), "invalid_type");
    expect_400(request(json::array({1, "a"})), "invalid_type");
    expect_400(request(json::array({"a", 7})), "invalid_type");
    expect_400(request(json::array({-1})), "");
    expect_400(request(json::array({100000000})), "");
    expect_400(request(json{{"text", "a"}}), "invalid_type");
    expect_400(request(std::vector<int>(257, 1)), "context_length_exceeded");
    json fmt = request("a");
    fmt["encoding_format"] = "int8";
    expect_400(fmt, "");
    json nomodel = {{"input", "a"}};
    expect_400(nomodel, "");
    // Another model is a 404, as for the other endpoints.
    Reply other = post(s, "/v1/embeddings", json{{"model", "gpt-4"}, {"input", "a"}});
    EXPECT_EQ(other.status, 404) << other.body;
    // The longest accepted input still embeds, and the server still generates afterwards.
    Reply longest = post(s, "/v1/embeddings", request(std::vector<int>(256, 1)));
    EXPECT_EQ(longest.status, 200) << longest.body;
    Reply gen = post(s, "/v1/completions", json{{"model", "tiny"}, {"prompt", "Hi"}, {"max_tokens", 2}, {"temperature", 0}});
    EXPECT_EQ(gen.status, 200) << gen.body;
    EXPECT_EQ(s.stop(), 0) << s.log();
}

}  // namespace
}  // namespace offgrid::test
