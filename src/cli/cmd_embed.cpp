// `offgrid embed`: the embedding of a text (pooled) or of each of its tokens, from any architecture.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "command.h"
#include "offgrid/context.h"
#include "offgrid/tokenizer.h"
#include "args/cli_args.h"
#include "models/default_model.h"
#include "offgrid/prompt_file.h"

namespace offgrid::cli {

namespace {

constexpr const char * kUsage =
    "usage: offgrid embed [-m FILE] (-p TEXT | -f FILE) [--pooling mean|last|cls|none] [-c N] [-t N]\n"
    "\n"
    "Prints the model's embedding of the text: one line of n_embd numbers (pooled over the text's tokens), or\n"
    "with --pooling none one line per token. The hidden state is the one the model's architecture defines\n"
    "(docs/architectures.md, \"Embeddings\").\n"
    "\n"
    "  -m, --model FILE    GGUF model (default: the built-in tiny model)\n"
    "  -p, --prompt TEXT   the text\n"
    "  -f, --file FILE     the text from a file\n"
    "  --pooling P         mean (default), last, cls (first token) or none\n"
    "  -c, --ctx-size N    context cells (default: the model's context length)\n"
    "  -t, --threads N     threads\n";

Pooling pooling_of(const std::string & s) {
    if (s == "mean") return Pooling::Mean;
    if (s == "last") return Pooling::Last;
    if (s == "cls") return Pooling::Cls;
    if (s == "none") return Pooling::None;
    throw tools::UsageError("--pooling: '" + s + "' is not one of mean, last, cls, none");
}

void print_row(const float * v, size_t n) {
    for (size_t i = 0; i < n; ++i) std::printf("%s%.7g", i ? " " : "", static_cast<double>(v[i]));
    std::printf("\n");
}

int embed_main(const std::vector<std::string> & args) {
    return tools::run_with_usage("embed", [&]() -> int {
        std::string model_path, prompt, prompt_file, pooling = "mean";
        int64_t n_ctx = 0, threads = std::max(1u, std::thread::hardware_concurrency());
        tools::ArgParser p;
        p.text({"-m", "--model"}, &model_path);
        p.text({"-p", "--prompt"}, &prompt);
        p.text({"-f", "--file"}, &prompt_file);
        p.text({"--pooling"}, &pooling);
        p.integer({"-c", "--ctx-size"}, &n_ctx, 0, 1 << 24);
        p.integer({"-t", "--threads"}, &threads, 1, 1024);
        if (!p.parse(args)) {
            std::fputs(kUsage, stdout);
            return 0;
        }
        if (p.given("-p") == p.given("-f")) throw tools::UsageError("give one of -p TEXT and -f FILE");
        const Pooling pool = pooling_of(pooling);
        if (!prompt_file.empty()) check_input_file(prompt_file, "-f");  // read later, in pieces
        if (model_path.empty()) model_path = tools::default_model_path();
        const auto model = Model::load(model_path);
        const Tokenizer tok = Tokenizer::from_model(*model);

        ContextParams cp;
        cp.n_ctx = static_cast<uint32_t>(n_ctx);
        cp.n_threads = static_cast<int>(threads);
        cp.embeddings = true;
        cp.pooling = pool;
        Context ctx(model, cp);
        const size_t room = ctx.params().n_batch;
        BoundedTokens text;
        if (!prompt_file.empty()) text = tokenize_file(tok, prompt_file, room, "-f");
        else text = tokenize_text(tok, prompt, room);
        const std::vector<int32_t> & tokens = text.tokens;
        if (text.over) {
            throw Error("the text has more than " + std::to_string(room) + " tokens, more than the context's " +
                        std::to_string(room));
        }
        if (tokens.empty()) throw tools::UsageError("the text has no tokens");
        const size_t n = model->n_embd();
        if (pool != Pooling::None) {
            const std::vector<float> e = ctx.embed(tokens);
            print_row(e.data(), n);
        } else {
            std::vector<BatchToken> b;
            for (size_t i = 0; i < tokens.size(); ++i) b.push_back({tokens[i], static_cast<int32_t>(i), {0}, true});
            const DecodeResult r = ctx.decode(b);
            if (!r.ok()) throw Error(r.message);
            for (int32_t i = 0; i < ctx.n_outputs(); ++i) print_row(ctx.embeddings(i), n);
        }
        std::fprintf(stderr, "embed: %zu tokens, n_embd %zu, pooling %s, %s\n", tokens.size(), n, pooling.c_str(),
                     model->architecture().c_str());
        return 0;
    });
}

}  // namespace

OFFGRID_COMMAND("embed", "print the embedding of a text (pooled) or of each token", embed_main);

}  // namespace offgrid::cli
