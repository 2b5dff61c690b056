// Compiled with include/ as the only include folder (target offgrid_public_headers in CMakeLists.txt): the public
// headers stand alone, and a program written against them needs nothing from src/.
#include "offgrid.h"
#include "offgrid/chat.h"
#include "offgrid/context.h"
#include "offgrid/crc32c.h"
#include "offgrid/distributed.h"
#include "offgrid/error.h"
#include "offgrid/files.h"
#include "offgrid/gguf.h"
#include "offgrid/prompt_file.h"
#include "offgrid/sampler.h"
#include "offgrid/speculative.h"
#include "offgrid/system.h"
#include "offgrid/tokenizer.h"
#include "offgrid/version.h"

namespace {

// Greedy continuation of a prompt through the C++ API alone; referenced so the compiler checks every call.
[[maybe_unused]] std::string continue_greedily(const std::string & model_path, const std::string & prompt, int n) {
    const auto model = offgrid::Model::load(model_path);
    const offgrid::Tokenizer tok = offgrid::Tokenizer::from_model(*model);
    offgrid::Context ctx(model, offgrid::ContextParams{});
    std::vector<offgrid::BatchToken> batch;
    for (const int32_t t : tok.prompt(prompt)) batch.push_back({t, -1, {0}, false});
    batch.back().output = true;
    if (!ctx.decode(batch).ok()) throw offgrid::Error("decode failed");
    offgrid::SamplingParams sp;
    sp.temperature = 0;
    offgrid::Sampler sampler(sp);
    std::string text;
    for (int i = 0; i < n; ++i) {
        const int32_t next = sampler.sample(ctx);
        sampler.accept(next);
        if (tok.is_end_of_generation(next)) break;
        text += tok.token_to_piece(next, false);
        if (!ctx.decode({offgrid::BatchToken{next, -1, {0}, true}}).ok()) break;
    }
    const std::vector<int32_t> chat = offgrid::render_chatml(tok, {{"user", text}});
    return text + std::to_string(chat.size()) + offgrid::version_string() + offgrid_status_name(OFFGRID_OK);
}

}  // namespace
