// `offgrid perplexity`: chunked perplexity of a text (or of token ids) under a model.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "command.h"
#include "kl_divergence.h"
#include "offgrid/files.h"
#include "offgrid/context.h"
#include "offgrid/tokenizer.h"
#include "args/cli_args.h"
#include "models/default_model.h"
#include "offgrid/prompt_file.h"

namespace offgrid::cli {

namespace {

constexpr const char * kUsage =
    "usage: offgrid perplexity [-m MODEL] -f FILE [-c N] [--chunks N] [-b N] [--ids] [--half] [options]\n"
    "\n"
    "Splits the tokens of FILE into chunks of N tokens (the last, shorter chunk is scored too when it has at\n"
    "least 2 tokens), evaluates each chunk in a fresh context and prints each chunk's perplexity and the final\n"
    "value with its standard error. By default every token after the first of a chunk is scored (the chunk's\n"
    "first token has no context); --half scores only the second half of each chunk, as llama.cpp does.\n"
    "\n"
    "  -m, --model FILE        GGUF model (default: the built-in model)\n"
    "  -f, --file FILE         the text (or, with --ids, the token ids)\n"
    "  --ids                   FILE holds token ids separated by white space, used as they are (no BOS)\n"
    "  -c, --ctx-size N        chunk length in tokens (default 512, or the model's context length if shorter)\n"
    "  --chunks N              score at most the first N chunks; FILE is read only that far (default: all)\n"
    "  -b, --batch-size N      most tokens per decode call (default: the chunk length)\n"
    "  -ub, --ubatch-size N    most tokens per micro-batch (default 512)\n"
    "  -t, --threads N         threads (default: the hardware's)\n"
    "  --half                  score only the second half of each chunk\n"
    "  -ctk, -ctv T            K / V cache type: f16 (default), f32 or q8_0\n"
    "  --qsa-dense             force dense attention on QSA layers\n"
    "  --mmap, --no-mmap       map the model file, or read it into memory (default: read when it takes at most\n"
    "                          half the available memory)\n"
    "  --act-quant M           activations of the quantised products: int16 (default), int8 (the speed path:\n"
    "                          prompts on the tile unit where the CPU has AMX), f32 (exact; docs/kernels.md)\n"
    "  --kl-divergence-base F  also save the log-probabilities of every scored token to F (the reference run)\n"
    "  --kl-divergence         score against F instead of a text: the tokens, chunk length and --half come from\n"
    "                          F (-f is not needed); prints mean KLD with percentiles, the same-top-1 share and\n"
    "                          both perplexities\n";

// -log softmax(row)[target], in double.
double token_nll(const float * row, int32_t n_vocab, int32_t target) {
    double max = row[0];
    for (int32_t v = 1; v < n_vocab; ++v) max = std::max<double>(max, row[v]);
    double sum = 0;
    for (int32_t v = 0; v < n_vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - max);
    return std::log(sum) + max - static_cast<double>(row[target]);
}

int perplexity_main(const std::vector<std::string> & args) {
    return tools::run_with_usage("perplexity", [&]() -> int {
        std::string model_path, file, ctk = "f16", ctv = "f16";
        int64_t chunk = 512, n_batch = 0, n_ubatch = 512, max_chunks = -1;
        int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, kMaxThreads);
        bool ids_mode = false, half = false, qsa_dense = false, kld_mode = false;
        std::string kld_path;
        WeightLoad weights = WeightLoad::Auto;
        tools::ArgParser p;
        p.weight_load(&weights);
        p.activation_mode();
        p.text({"-m", "--model"}, &model_path);
        p.text({"-f", "--file"}, &file);
        p.flag({"--ids"}, &ids_mode);
        p.flag({"--half"}, &half);
        p.flag({"--qsa-dense"}, &qsa_dense);
        p.text({"--kl-divergence-base"}, &kld_path);
        p.flag({"--kl-divergence"}, &kld_mode);
        p.integer({"-c", "--ctx-size"}, &chunk, 2, 1 << 24);
        p.integer({"--chunks"}, &max_chunks, 1, int64_t(1) << 32);
        p.integer({"-b", "--batch-size"}, &n_batch, 1, 1 << 24);
        p.integer({"-ub", "--ubatch-size"}, &n_ubatch, 1, 1 << 24);
        p.integer({"-t", "--threads"}, &threads, 1, kMaxThreads);
        p.text({"-ctk", "--cache-type-k"}, &ctk);
        p.text({"-ctv", "--cache-type-v"}, &ctv);
        if (!p.parse(args)) {
            std::fputs(kUsage, stdout);
            return 0;
        }
        if (kld_mode && kld_path.empty()) throw tools::UsageError("--kl-divergence needs --kl-divergence-base FILE");
        if (file.empty() && !kld_mode) throw tools::UsageError("-f FILE is required");
        if (p.given("-m") && model_path.empty()) throw tools::UsageError("-m: empty file name");
        for (const std::string * t : {&ctk, &ctv}) {
            if (*t != "f16" && *t != "f32" && *t != "q8_0") {
                throw tools::UsageError("cache type '" + *t + "' is not f16, f32 or q8_0");
            }
        }
        std::unique_ptr<KldBaseReader> kld_base;
        if (kld_mode) {
            kld_base = std::make_unique<KldBaseReader>(kld_path);
            chunk = kld_base->chunk();
            half = kld_base->half();
        } else {
            check_input_file(file, "-f");  // read after the model loads, in pieces
        }
        if (model_path.empty()) model_path = tools::default_model_path();
        const auto model = Model::load(model_path, weights);
        const int32_t n_vocab = model->n_vocab();
        if (!p.given("-c") && !kld_mode) chunk = std::min<int64_t>(chunk, std::max<uint32_t>(2, model->n_ctx_train()));
        if (static_cast<uint64_t>(chunk) > model->n_ctx_train()) {
            throw Error("-c " + std::to_string(chunk) + " exceeds the model's context length " +
                        std::to_string(model->n_ctx_train()));
        }

        // With --chunks N only the first N chunks' tokens are read (like llama.cpp's --chunks); the file is
        // tokenised in pieces either way, never held whole.
        const size_t limit = p.given("--chunks") ? static_cast<size_t>(max_chunks) * static_cast<size_t>(chunk) : SIZE_MAX;
        BoundedTokens input;
        if (kld_mode) {
            if (kld_base->n_vocab() != static_cast<uint32_t>(n_vocab)) {
                throw Error("--kl-divergence-base " + kld_path + ": saved with " + std::to_string(kld_base->n_vocab()) +
                            " logits per row, the model has " + std::to_string(n_vocab));
            }
            input.tokens = kld_base->tokens();
        } else if (ids_mode) {
            input = read_token_ids(file, n_vocab, limit, "-f");
        } else {
            const Tokenizer tok = Tokenizer::from_model(*model);
            input = tokenize_file(tok, file, limit, "-f");
        }
        std::vector<int32_t> & tokens = input.tokens;
        if (tokens.size() > limit) tokens.resize(limit);
        if (tokens.size() < 2) {
            throw Error(file + ": " + std::to_string(tokens.size()) + " tokens; perplexity needs at least 2");
        }

        ContextParams cp;
        cp.n_ctx = static_cast<uint32_t>(std::min<size_t>(static_cast<size_t>(chunk), tokens.size()));
        cp.n_batch = n_batch > 0 ? static_cast<uint32_t>(n_batch) : cp.n_ctx;
        cp.n_ubatch = static_cast<uint32_t>(n_ubatch);
        cp.n_threads = static_cast<int>(threads);
        cp.type_k = ctk;
        cp.type_v = ctv;
        cp.qsa_dense = qsa_dense;
        Context ctx(model, cp);
        std::unique_ptr<KldBaseWriter> kld_out;
        if (!kld_path.empty() && !kld_mode) {
            kld_out = std::make_unique<KldBaseWriter>(kld_path, static_cast<uint32_t>(n_vocab),
                                                      static_cast<uint32_t>(chunk), half, tokens);
        }
        KldStats kld_stats;
        const size_t batch = ctx.params().n_batch;

        std::vector<std::pair<size_t, size_t>> chunks;  // [begin, end)
        for (size_t b = 0; b < tokens.size(); b += static_cast<size_t>(chunk)) {
            const size_t e = std::min(tokens.size(), b + static_cast<size_t>(chunk));
            if (e - b >= 2) chunks.emplace_back(b, e);
        }
        std::printf("perplexity: %zu tokens, %zu chunk(s) of up to %lld tokens%s, scoring %s\n", tokens.size(),
                    chunks.size(), static_cast<long long>(chunk), input.over ? " (--chunks: the file has more)" : "",
                    half ? "the second half of each chunk" : "every token after the first of each chunk");

        const auto t0 = std::chrono::steady_clock::now();
        double sum = 0, sum2 = 0;
        size_t count = 0;
        for (size_t c = 0; c < chunks.size(); ++c) {
            const auto [begin, end] = chunks[c];
            const size_t n = end - begin;
            const size_t first = half ? n / 2 : 0;  // rows first .. n-2 predict tokens first+1 .. n-1
            ctx.clear();
            double chunk_sum = 0;
            for (size_t i = 0; i < n; i += batch) {
                const size_t m = std::min(batch, n - i);
                std::vector<BatchToken> b(m);
                for (size_t j = 0; j < m; ++j) {
                    const size_t k = i + j;
                    b[j].token = tokens[begin + k];
                    b[j].pos = static_cast<int32_t>(k);
                    b[j].output = k >= first && k + 1 < n;
                }
                const DecodeResult r = ctx.decode(b);
                if (!r.ok()) throw Error("chunk " + std::to_string(c + 1) + ": " + r.message);
                int32_t row = 0;
                for (size_t j = 0; j < m; ++j) {
                    if (!b[j].output) continue;
                    const float * logits = ctx.logits(row++);
                    const int32_t target = tokens[begin + i + j + 1];
                    const double nll = token_nll(logits, n_vocab, target);
                    if (kld_out) kld_out->add_row(logits);
                    if (kld_base) kld_stats.add(kld_base->next_row(), logits, target);
                    if (!std::isfinite(nll)) {
                        // NaN or infinite logits (damaged weights): a perplexity of nan is no result.
                        throw Error("chunk " + std::to_string(c + 1) + ": token " + std::to_string(begin + i + j + 1) +
                                    ": the model gave non-finite logits (negative log-likelihood " +
                                    std::to_string(nll) + "); its weights may be damaged");
                    }
                    chunk_sum += nll;
                    sum += nll;
                    sum2 += nll * nll;
                    ++count;
                }
            }
            const size_t scored = n - 1 - first;
            std::printf("[%zu] tokens %zu..%zu: ppl %.6f (running %.6f)\n", c + 1, begin, end - 1,
                        std::exp(chunk_sum / static_cast<double>(scored)), std::exp(sum / static_cast<double>(count)));
            std::fflush(stdout);
        }
        const double mean = sum / static_cast<double>(count);
        const double var = count > 1 ? std::max(0.0, sum2 / static_cast<double>(count) - mean * mean) : 0.0;
        const double err = count > 1 ? std::sqrt(var / static_cast<double>(count - 1)) : 0.0;
        const double ppl = std::exp(mean);
        std::printf("Final estimate: PPL = %.8f +/- %.8f (%zu scored tokens, mean NLL %.8f)\n", ppl, ppl * err, count,
                    mean);
        if (kld_out) kld_out->finish();
        if (kld_base) {
            std::printf("\n");
            kld_stats.print(stdout);
        }
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "perplexity: %.3f s, %.1f tokens/s\n", secs, secs > 0 ? tokens.size() / secs : 0.0);
        return 0;
    });
}

}  // namespace

OFFGRID_COMMAND("perplexity", "perplexity of a text or of token ids, in chunks", perplexity_main);

}  // namespace offgrid::cli
