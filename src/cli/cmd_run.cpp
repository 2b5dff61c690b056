// `offgrid run`: tokenise a prompt, decode it in n_batch chunks, then sample and stream text to stdout.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "command.h"
#include "offgrid/distributed.h"
#include "offgrid/files.h"
#include "offgrid/context.h"
#include "offgrid/sampler.h"
#include "offgrid/speculative.h"
#include "offgrid/tokenizer.h"
#include "args/cli_args.h"
#include "models/default_model.h"
#include "offgrid/prompt_file.h"

namespace offgrid::cli {

namespace {

constexpr const char * kDefaultPrompt = "The cabin stands at the end of a long gravel road, where";

constexpr const char * kUsage =
    "usage: offgrid run [-m MODEL] [-p TEXT | -f FILE] [-n N] [options]\n"
    "\n"
    "Decodes the prompt and streams sampled text to stdout; statistics go to stderr. Without -m the built-in\n"
    "`tiny` model is used (generated once into $OFFGRID_CACHE, $XDG_CACHE_HOME/offgrid or ~/.cache/offgrid).\n"
    "\n"
    "  -m, --model FILE         GGUF model with a tokenizer\n"
    "  -p, --prompt TEXT        prompt text (default: a short built-in sentence)\n"
    "  -f, --file FILE          read the prompt from FILE\n"
    "  -n, --n-predict N        tokens to generate (default 128; -1 = until EOS or the context is full)\n"
    "  -c, --ctx-size N         context cells (default 0 = the model's context length)\n"
    "  -b, --batch-size N       most prompt tokens per decode call (default 2048)\n"
    "  -ub, --ubatch-size N     most tokens per micro-batch (default 512)\n"
    "  -t, --threads N          threads (default: the hardware's)\n"
    "  -s, --seed N             sampling seed (default 0)\n"
    "  --split S                under mpirun: each rank's layers, 'auto' (default) or '0-11,12-23'\n"
    "  --rank-timeout S         under mpirun: seconds a rank waits for another before ending the job (120)\n"
    "  --temp X                 temperature (default 0.8; <= 0 = greedy)\n"
    "  --top-k N                top-k (default 40; 0 = off)\n"
    "  --top-p X                top-p in (0, 1] (default 0.95; 1 = off)\n"
    "  --min-p X                min-p in [0, 1] (default 0.05; 0 = off)\n"
    "  --repeat-penalty X       repetition penalty (default 1.0 = off)\n"
    "  --repeat-last-n N        penalty window (default 64; 0 = off, -1 = whole history)\n"
    "  -ctk, --cache-type-k T   K cache type: f16 (default), f32 or q8_0 (indexer: f16, or f32 with f32)\n"
    "  -ctv, --cache-type-v T   V cache type: f16 (default), f32 or q8_0\n"
    "  --qsa-dense              force dense attention on QSA layers (comparisons)\n"
    "  --state-save FILE        after the run, write the context state and the token list to FILE\n"
    "  --state-load FILE        before the prompt, restore a state written by --state-save (same model only);\n"
    "                           the prompt (may be empty: -p '') continues it\n"
    "  --spec-type T            speculative decoding: none (default), draft-mtp (the model's NextN head) or\n"
    "                           ngram-simple (lookup in the prompt and output); output is the same as without\n"
    "  --spec-draft-n-max N     most draft tokens per round (default 3)\n"
    "  --spec-draft-n-min N     drop drafts shorter than N (default 0)\n"
    "  --spec-draft-p-min X     draft-mtp: stop drafting below this confidence (default 0)\n"
    "  -md, --model-draft FILE  draft-mtp: an MTP-only GGUF borrowing the model's embedding and head\n"
    "  --mmap, --no-mmap        map the model file, or read it into memory (huge pages: faster decode; costs the\n"
    "                           file's size in RAM). Default: read when it takes at most half the available memory\n"
    "  --act-quant M            activations of the quantised products: int16 (default), int8 (the speed path:\n"
    "                           prompts on the tile unit where the CPU has AMX), f32 (exact; docs/kernels.md)\n";


// A one-line bar on stderr, redrawn in place; only when stderr is a terminal.
class Progress {
public:
    Progress(size_t total, bool enabled) : total_(total), enabled_(enabled) {}
    void update(size_t done) {
        if (!enabled_) return;
        const int width = 40;
        const int filled = total_ ? static_cast<int>(width * done / total_) : width;
        std::fprintf(stderr, "\rprompt [%.*s%*s] %zu/%zu", filled, "########################################",
                     width - filled, "", done, total_);
        std::fflush(stderr);
    }
    void finish() {
        if (enabled_) std::fprintf(stderr, "\r%*s\r", 80, "");
    }

private:
    size_t total_;
    bool enabled_;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run_main(const std::vector<std::string> & args) {
    return tools::run_with_usage("run", [&]() -> int {
        std::string model_path, prompt, prompt_file, state_save, state_load, ctk = "f16", ctv = "f16";
        int64_t n_predict = 128, n_ctx = 0, n_batch = 2048, n_ubatch = 512, seed = 0, top_k = 40, last_n = 64;
        int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, kMaxThreads);
        float temp = 0.8f, top_p = 0.95f, min_p = 0.05f, repeat_penalty = 1.0f;
        bool qsa_dense = false;
        WeightLoad weights = WeightLoad::Auto;
        std::string spec_type = "none";
        SpecParams spec;
        int64_t spec_n_max = spec.n_max, spec_n_min = spec.n_min;
        tools::ArgParser p;
        p.text({"--spec-type"}, &spec_type);
        p.integer({"--spec-draft-n-max"}, &spec_n_max, 1, 64);
        p.integer({"--spec-draft-n-min"}, &spec_n_min, 0, 64);
        p.real({"--spec-draft-p-min"}, &spec.p_min, 0.0f, 1.0f);
        p.text({"-md", "--model-draft"}, &spec.draft_model);
        p.weight_load(&weights);
        p.activation_mode();
        p.text({"-m", "--model"}, &model_path);
        p.text({"-p", "--prompt"}, &prompt);
        p.text({"-f", "--file"}, &prompt_file);
        p.integer({"-n", "--n-predict"}, &n_predict, -1, INT32_MAX);
        p.integer({"-c", "--ctx-size"}, &n_ctx, 0, 1 << 24);
        p.integer({"-b", "--batch-size"}, &n_batch, 1, 1 << 24);
        p.integer({"-ub", "--ubatch-size"}, &n_ubatch, 1, 1 << 24);
        p.integer({"-t", "--threads"}, &threads, 1, kMaxThreads);
        p.integer({"-s", "--seed"}, &seed, 0, INT64_MAX);
        p.real({"--temp"}, &temp, -1e9f, 1e9f);
        p.integer({"--top-k"}, &top_k, 0, INT32_MAX);
        p.real({"--top-p"}, &top_p, -1e9f, 1e9f);
        p.real({"--min-p"}, &min_p, -1e9f, 1e9f);
        p.real({"--repeat-penalty"}, &repeat_penalty, -1e9f, 1e9f);
        p.integer({"--repeat-last-n"}, &last_n, -1e9, 1e9);
        p.text({"-ctk", "--cache-type-k"}, &ctk);
        p.text({"-ctv", "--cache-type-v"}, &ctv);
        p.flag({"--qsa-dense"}, &qsa_dense);
        p.text({"--state-save"}, &state_save);
        p.text({"--state-load"}, &state_load);
        distributed::PipelineOptions po;
        p.text({"--split"}, &po.split);
        int64_t rank_timeout = 120;
        p.integer({"--rank-timeout"}, &rank_timeout, 1, 86400);
        if (!p.parse(args)) {
            std::fputs(kUsage, stdout);
            return 0;
        }
        try {
            spec.type = spec_type_from_name(spec_type);
        } catch (const Error & e) {
            throw tools::UsageError(std::string("--spec-type: ") + e.what());
        }
        spec.n_max = static_cast<int32_t>(spec_n_max);
        spec.n_min = static_cast<int32_t>(spec_n_min);
        if (spec.n_min > spec.n_max) throw tools::UsageError("--spec-draft-n-min is above --spec-draft-n-max");
        if (p.given("-p") && p.given("-f")) {
            throw tools::UsageError("give at most one of -p TEXT and -f FILE");
        }
        for (const std::string * t : {&ctk, &ctv}) {
            if (*t != "f16" && *t != "f32" && *t != "q8_0") {
                throw tools::UsageError("cache type '" + *t + "' is not f16, f32 or q8_0");
            }
        }
        SamplingParams sp;
        sp.temperature = temp;
        sp.top_k = static_cast<int32_t>(top_k);
        sp.top_p = top_p;
        sp.min_p = min_p;
        sp.repeat_penalty = repeat_penalty;
        sp.repeat_last_n = static_cast<int32_t>(last_n);
        sp.seed = static_cast<uint64_t>(seed);
        std::optional<Sampler> checked;  // validates the flags before any work
        try {
            checked.emplace(sp);
        } catch (const Error & e) {
            throw tools::UsageError(e.what());
        }
        const bool prompt_given = p.given("-p") || p.given("-f");
        for (const char * flag : {"-m", "-f", "--state-save", "--state-load"}) {
            std::string * value = std::string(flag) == "-m" ? &model_path : std::string(flag) == "-f" ? &prompt_file
                                  : std::string(flag) == "--state-save" ? &state_save : &state_load;
            if (p.given(flag) && value->empty()) throw tools::UsageError(std::string(flag) + ": empty file name");
        }
        // Checked before any work, so a run never ends in a state that cannot be written.
        if (!state_save.empty()) check_output_path(state_save, "--state-save");
        if (!prompt_file.empty()) check_input_file(prompt_file, "-f");  // read later, in pieces
        if (!prompt_given && state_load.empty()) prompt = kDefaultPrompt;

        if (model_path.empty()) model_path = tools::default_model_path();
        po.timeout = static_cast<double>(rank_timeout);
        // Under mpirun each rank runs its layers of the pipeline (docs/distributed.md); every rank decodes and
        // samples the same tokens, rank 0 prints them and writes the state file.
        const bool piped = distributed::under_launcher() || !po.split.empty();
        if (piped && spec.type == SpecType::DraftMtp) {
            // The draft head reads the last layer's streams and the embedding and head tables, which a rank of a
            // split does not hold together.
            throw tools::UsageError("--spec-type draft-mtp: not available under an MPI launcher or with --split (the "
                                    "MTP draft head needs the whole model in one process); use --spec-type "
                                    "ngram-simple or none there, or run draft-mtp as one process without mpirun");
        }
        const distributed::Pipeline pipe = piped ? distributed::start_pipeline(model_path, po) : distributed::Pipeline{};
        const auto model = pipe.model ? pipe.model : Model::load(model_path, weights);
        const bool saving_state = !state_save.empty();
        if (!pipe.writes_outputs()) {
            if (std::freopen("/dev/null", "w", stdout) == nullptr) throw Error("cannot silence rank " + std::to_string(pipe.rank));
            state_save.clear();
        }
        if (!state_save.empty()) check_output_path(state_save, "--state-save");  // also refuses the model's file
        const Tokenizer tok = Tokenizer::from_model(*model);

        ContextParams cp;
        cp.n_ctx = static_cast<uint32_t>(n_ctx);
        cp.n_batch = static_cast<uint32_t>(n_batch);
        cp.n_ubatch = static_cast<uint32_t>(n_ubatch);
        cp.n_threads = static_cast<int>(threads);
        cp.type_k = ctk;
        cp.type_v = ctv;
        cp.qsa_dense = qsa_dense;
        if (spec.type != SpecType::None) SpeculativeDecoder::configure(cp, spec);
        // Beyond the trained length the caches only cost memory (and a huge -c could exhaust it).
        if (cp.n_ctx > model->n_ctx_train()) {
            throw Error("-c " + std::to_string(cp.n_ctx) + " exceeds the model's context length " +
                        std::to_string(model->n_ctx_train()));
        }
        Context ctx(model, cp);
        const uint32_t ctx_size = ctx.params().n_ctx;
        if (cp.n_ctx == 0 && ctx_size < model->n_ctx_train()) {
            std::fprintf(stderr,
                         "run: context capped at %u cells: the model's context_length %u would need more than half of "
                         "the memory available now; ask for more with -c N\n",
                         ctx_size, model->n_ctx_train());
        }

        // Tokens of the run so far; the memory holds all but possibly the last (sampled, not yet decoded).
        std::vector<int32_t> history;
        std::vector<int32_t> to_decode;
        if (!state_load.empty()) {
            try {
                history = ctx.state_load_file(state_load);
            } catch (const Error & e) {
                if (spec.type == SpecType::None) throw;
                // The memory's shape includes the rollback snapshots a speculative context keeps.
                throw Error(std::string(e.what()) + " (a speculative run keeps --spec-draft-n-max rollback snapshots: "
                            "load states saved by a run with the same --spec-draft-n-max)");
            }
            const size_t in_memory = static_cast<size_t>(int64_t{ctx.seq_pos_max(0)} + 1);  // no int32 overflow
            if (history.size() == in_memory + 1) {
                to_decode.push_back(history.back());  // the token sampled last, never decoded
                history.pop_back();
            } else if (history.size() != in_memory) {
                throw Error(state_load + ": the token list (" + std::to_string(history.size()) +
                            " tokens) does not match the saved memory (" + std::to_string(in_memory) + " tokens)");
            }
        }
        std::vector<int32_t> prompt_tokens;
        if (history.empty() && to_decode.empty() && tok.add_bos() && tok.bos()) prompt_tokens.push_back(*tok.bos());
        if (!prompt_file.empty()) {
            // Read and tokenised in pieces, refused once it passes what the context can take: a huge file costs
            // about a context's worth of reading, not its own size in memory.
            const size_t used = history.size() + to_decode.size() + prompt_tokens.size();
            const size_t room = ctx_size > used ? ctx_size - used : 0;
            BoundedTokens file_tokens = tokenize_file(tok, prompt_file, room, "-f");
            if (file_tokens.over) {
                throw Error("the prompt is more than " + std::to_string(used + room) +
                            " tokens, longer than the context of " + std::to_string(ctx_size) + " cells (-c)");
            }
            prompt_tokens.insert(prompt_tokens.end(), file_tokens.tokens.begin(), file_tokens.tokens.end());
        } else {
            tok.tokenize(prompt, false, prompt_tokens);
        }
        to_decode.insert(to_decode.end(), prompt_tokens.begin(), prompt_tokens.end());
        if (to_decode.empty()) {
            throw tools::UsageError(state_load.empty() ? "the prompt is empty"
                                                         : "nothing to continue from: the state has no pending token; give a prompt");
        }
        if (history.size() + to_decode.size() > ctx_size) {
            throw Error("the prompt is " + std::to_string(history.size() + to_decode.size()) +
                        " tokens, longer than the context of " + std::to_string(ctx_size) + " cells (-c)");
        }

        Sampler sampler = std::move(*checked);
        for (const int32_t t : history) sampler.accept(t);
        std::optional<SpeculativeDecoder> spec_dec;
        if (spec.type != SpecType::None) {
            spec_dec.emplace(ctx, spec);
            spec_dec->reset(0, history);
        }

        // Prompt, in n_batch chunks; the progress bar advances per micro-batch.
        const bool tty = ::isatty(2) == 1;
        const size_t n_prompt = to_decode.size();
        Progress bar(n_prompt, tty && n_prompt > ctx.params().n_ubatch);
        size_t done = 0, chunk_done = 0, chunk_size = 0;
        ctx.set_abort_callback([&]() {
            bar.update(done + std::min(chunk_done, chunk_size));
            chunk_done += ctx.params().n_ubatch;
            return false;
        });
        const auto t_prompt = std::chrono::steady_clock::now();
        const size_t n_batch_eff = ctx.params().n_batch;
        for (size_t i = 0; i < n_prompt; i += n_batch_eff) {
            const size_t n = std::min(n_batch_eff, n_prompt - i);
            std::vector<BatchToken> batch(n);
            for (size_t j = 0; j < n; ++j) {
                batch[j].token = to_decode[i + j];
                batch[j].output = i + j + 1 == n_prompt;
            }
            chunk_done = 0;
            chunk_size = n;
            const DecodeResult r = spec_dec ? spec_dec->prefill(0, std::vector<int32_t>(to_decode.begin() + i, to_decode.begin() + i + n))
                                            : ctx.decode(batch);
            if (!r.ok()) throw Error("prompt: " + r.message);
            done += n;
        }
        bar.finish();
        ctx.set_abort_callback(nullptr);
        const double prompt_s = seconds_since(t_prompt);
        for (const int32_t t : to_decode) {
            history.push_back(t);
            sampler.accept(t);
        }

        // Generation: sample, stream, decode the token unless it is the last one.
        std::string pending_text;
        int32_t n_generated = 0;
        const auto t_gen = std::chrono::steady_clock::now();
        double decode_s = 0;
        const char * stop_reason = "length";
        // Emits one token; false when generation ends with it.
        auto emit = [&](int32_t next) {
            history.push_back(next);
            ++n_generated;
            if (tok.is_end_of_generation(next)) {
                stop_reason = "end of text";
                return false;
            }
            pending_text += tok.token_to_piece(next, false);
            const size_t ready = utf8_complete_prefix(pending_text);
            if (ready > 0) {
                std::fwrite(pending_text.data(), 1, ready, stdout);
                std::fflush(stdout);
                pending_text.erase(0, ready);
            }
            if (n_predict >= 0 && n_generated >= n_predict) return false;
            if (history.size() > ctx_size) {
                stop_reason = "context full";
                return false;
            }
            return true;
        };
        if (n_predict != 0) {
            const float * logits = ctx.logits(ctx.n_outputs() - 1);
            const int32_t first = sampler.sample({logits, static_cast<size_t>(model->n_vocab())});
            sampler.accept(first);
            bool going = emit(first);
            while (going) {
                const auto t0 = std::chrono::steady_clock::now();
                if (spec_dec) {
                    // A round emits 1 .. n_max + 1 tokens; the sampler has drawn each of them in order.
                    std::vector<SpeculativeDecoder::Request> reqs(1);
                    reqs[0].last = history.back();
                    reqs[0].sampler = &sampler;
                    reqs[0].max_tokens = n_predict < 0 ? INT32_MAX : static_cast<int32_t>(n_predict - n_generated);
                    const DecodeResult r = spec_dec->step(reqs);
                    decode_s += seconds_since(t0);
                    if (!r.ok()) throw Error("generation: " + r.message);
                    for (const int32_t t : reqs[0].out) {
                        if (!(going = emit(t))) break;
                    }
                } else {
                    const DecodeResult r = ctx.decode({BatchToken{history.back(), -1, {0}, true}});
                    decode_s += seconds_since(t0);
                    if (!r.ok()) throw Error("generation: " + r.message);
                    const int32_t next = sampler.sample({ctx.logits(ctx.n_outputs() - 1), static_cast<size_t>(model->n_vocab())});
                    sampler.accept(next);
                    going = emit(next);
                }
            }
        }
        std::fwrite(pending_text.data(), 1, pending_text.size(), stdout);
        std::fputc('\n', stdout);
        std::fflush(stdout);
        const double gen_s = seconds_since(t_gen);

        if (saving_state && pipe.gather) pipe.gather(ctx);
        if (!state_save.empty()) ctx.state_save_file(state_save, history);
        if (saving_state && pipe.saved) pipe.saved();
        if (pipe.report) std::fprintf(stderr, "run: %s\n", pipe.report().c_str());
        distributed::end_pipeline();

        const int32_t n_decoded = std::max(0, n_generated - 1);
        std::fprintf(stderr,
                     "run: prompt %zu tokens in %.3f s (%.1f tokens/s); generated %d tokens in %.3f s "
                     "(decode %.1f tokens/s, stop: %s); memory: %s\n",
                     n_prompt, prompt_s, prompt_s > 0 ? n_prompt / prompt_s : 0.0, n_generated, gen_s,
                     decode_s > 0 ? n_decoded / decode_s : 0.0, stop_reason, ctx.memory_breakdown().describe().c_str());
        if (spec_dec) {
            const SpecStats & st = spec_dec->stats();
            std::fprintf(stderr, "run: speculative %s: %llu rounds, %llu drafted, %llu accepted (%.1f %%), %.2f tokens per round\n",
                         spec_type_name(spec.type), static_cast<unsigned long long>(st.rounds),
                         static_cast<unsigned long long>(st.drafted), static_cast<unsigned long long>(st.accepted),
                         100.0 * st.acceptance(), st.tokens_per_round());
        }
        return 0;
    });
}

}  // namespace

OFFGRID_COMMAND("run", "generate text from a prompt (the built-in model without -m)", run_main);

}  // namespace offgrid::cli
