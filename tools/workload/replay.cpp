#include "workload/replay.h"

#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>

#include "offgrid/error.h"
#include "offgrid/files.h"
#include "workload/logrec.h"

namespace offgrid::tools {

namespace {

uint64_t fnv1a64(const float * v, size_t n) {
    uint64_t h = 1469598103934665603ull;
    const auto * b = reinterpret_cast<const unsigned char *>(v);
    for (size_t i = 0; i < n * sizeof(float); ++i) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

int32_t argmax(const float * v, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; ++i) {
        if (v[i] > v[best]) {
            best = i;
        }
    }
    return best;
}

// The last position a token may take: the memory's batch rule (positions below 2^31 - 2), so that every
// sequence's pos_max + 1 fits in int32.
constexpr int64_t kMaxPos = INT32_MAX - 2;

// The `set` keys the script may use, with their defaults.
struct Settings {
    uint32_t n_ctx = 0;
    uint32_t n_batch = 0;
    uint32_t n_ubatch = 512;
    uint32_t n_seq_max = 1;
    bool unified = false;
    uint32_t n_rs_seq = 0;
    std::string type_k = "f16";
    std::string type_v = "f16";
    int threads = 1;
    bool outputs_all = true;
    int log_logits = 8;
    bool expect_failures = false;  // own key: failed decode calls are part of the test (exit status 0)
};

class Runner {
public:
    Runner(std::shared_ptr<const Model> model, const Workload & wl, const ReplayOptions & opt)
        : model_(std::move(model)), wl_(wl), opt_(opt), n_vocab_(model_->n_vocab()) {
        if (opt.n_threads < 0 || opt.n_threads > kMaxThreads) {
            throw Error("-t " + std::to_string(opt.n_threads) + " is outside 1.." + std::to_string(kMaxThreads));
        }
        // Both outputs go through temporary files renamed into place at the end: a script that fails leaves no
        // partial output, and an output path that is the model itself is refused before anything runs.
        if (!opt.bin_path.empty()) check_output_path(opt.bin_path, "-b");
        if (!opt.text_path.empty() && opt.text_path != "-") check_output_path(opt.text_path, "-o");
        if (!opt.bin_path.empty()) {
            bin_ = std::make_unique<LogrecWriter>(opt.bin_path, n_vocab_);
        }
        if (opt.text_path == "-") {
            text_ = stdout;
        } else if (!opt.text_path.empty()) {
            text_file_ = std::make_unique<AtomicFile>(opt.text_path, "-o");
            text_ = text_file_->stream();
        }
        log("# offgrid replay model=%s script=%s\n", model_->path().c_str(), wl.name.c_str());
        log("# model %s\n", model_->describe().c_str());
        log("# columns: out STEP SEQ POS TOK ARGMAX MAXLOGIT FNV64(all logits) LOGITS[0..n)\n");
    }

    ReplaySummary run() {
        for (const auto & c : wl_.commands) {
            line_ = c.line;
            try {
                run_command(c);
            } catch (const Error & e) {
                // Every failure names the script line it happened on.
                const std::string where = wl_.name + ":" + std::to_string(line_) + ": ";
                if (std::string(e.what()).rfind(where, 0) == 0) throw;
                throw Error(where + e.what());
            }
        }
        log("# done steps=%d tokens=%d\n", summary_.steps, summary_.rows);
        if (bin_) {
            bin_->close();
        }
        if (text_file_) {
            text_ = nullptr;
            text_file_->commit();
        }
        summary_.failures_expected = s_.expect_failures;
        return summary_;
    }

private:
    [[noreturn]] void fail(const std::string & what) const {
        throw Error(wl_.name + ":" + std::to_string(line_) + ": " + what);
    }

    // printf-style, checked by the compiler against its arguments where it can (GCC, Clang).
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    void log(const char * fmt, ...) {
        if (text_ == nullptr) return;
        va_list args;
        va_start(args, fmt);
        std::vfprintf(text_, fmt, args);
        va_end(args);
    }

    Context & ctx() {
        if (!ctx_) {
            create();
        }
        return *ctx_;
    }

    void create() {
        ContextParams p;
        p.n_ctx = s_.n_ctx;
        p.n_batch = s_.n_batch;
        p.n_ubatch = s_.n_ubatch;
        p.n_seq_max = s_.n_seq_max;
        p.unified = s_.unified;
        p.n_rs_seq = s_.n_rs_seq;
        p.type_k = s_.type_k;
        p.type_v = s_.type_v;
        p.n_threads = opt_.n_threads > 0 ? opt_.n_threads : s_.threads;
        ctx_.reset();
        ctx_ = std::make_unique<Context>(model_, p);
        const auto & q = ctx_->params();
        log("# context n_ctx=%u n_batch=%u n_ubatch=%u n_seq_max=%u n_rs_seq=%u unified=%d threads=%d type_k=%s "
            "type_v=%s outputs=%s\n",
            q.n_ctx, q.n_batch, q.n_ubatch, q.n_seq_max, q.n_rs_seq, q.unified ? 1 : 0, q.n_threads,
            q.type_k.c_str(), q.type_v.c_str(), s_.outputs_all ? "all" : "last");
        last_argmax_.clear();
        seq_tokens_.clear();
    }

    void set(const std::string & key, const std::string & value) {
        // Values outside [0, hi] are refused here, with the line, rather than later without it.
        auto u32 = [&](uint64_t hi = UINT32_MAX) -> uint32_t {
            uint64_t v = 0;
            const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
            if (ec == std::errc::invalid_argument || p != value.data() + value.size() || value.empty()) {
                fail("set " + key + ": expected a non-negative integer, got '" + value + "'");
            }
            if (ec == std::errc::result_out_of_range || v > hi) {
                fail("set " + key + ": " + value + " is outside 0.." + std::to_string(hi));
            }
            return static_cast<uint32_t>(v);
        };
        constexpr uint64_t kMaxCells = 1u << 30;  // the context's limit (offgrid/context.h)
        if (key == "n_ctx") s_.n_ctx = u32(kMaxCells);
        else if (key == "n_batch") s_.n_batch = u32(kMaxCells);
        else if (key == "n_ubatch") s_.n_ubatch = u32(kMaxCells);
        else if (key == "n_seq_max") s_.n_seq_max = u32(256);
        else if (key == "unified") s_.unified = u32(1) != 0;
        else if (key == "n_rs_seq") s_.n_rs_seq = u32(1024);
        else if (key == "type_k") s_.type_k = value;
        else if (key == "type_v") s_.type_v = value;
        else if (key == "threads") s_.threads = static_cast<int>(u32(kMaxThreads));
        else if (key == "expect_failures") s_.expect_failures = u32(1) != 0;
        else if (key == "outputs") {
            if (value != "all" && value != "last") fail("set outputs: expected all or last");
            s_.outputs_all = value == "all";
        } else if (key == "logits") s_.log_logits = static_cast<int>(u32(INT32_MAX));
        else if (key == "fa") {
            // The engine has one attention path; the golden set records fa off, which it matches.
        } else if (key == "embeddings") {
            if (u32() != 0) fail("set embeddings 1: embeddings mode is not supported");
        } else if (key == "dump" || key == "dump_n" || key == "qsa_report" || key == "qsa_eps") {
            // reference diagnostics: text-log only, ignored
        } else {
            log("# unknown setting %s (skipped)\n", key.c_str());
        }
    }

    // One decode call; writes its output rows. Returns false when the call failed.
    bool decode(const std::vector<BatchToken> & batch) {
        const int step = summary_.steps++;
        const DecodeResult r = ctx().decode(batch);
        if (!r.ok()) {
            ++summary_.failed_calls;
            log("op decode step=%d -> failed: %s\n", step, r.message.c_str());
            return false;
        }
        int32_t row = 0;
        for (const auto & t : batch) {
            if (!t.output) {
                continue;
            }
            const float * l = ctx_->logits(row++);
            const int32_t am = argmax(l, n_vocab_);
            for (int32_t s : t.seqs) {
                last_argmax_[s] = am;
            }
            if (bin_) {
                bin_->write(step, t.seqs[0], t.pos, t.token, l);
            }
            log("out %d %d %d %d %d %.7g %016" PRIx64, step, t.seqs[0], t.pos, t.token, am, l[am],
                fnv1a64(l, static_cast<size_t>(n_vocab_)));
            for (int32_t i = 0; i < std::min(s_.log_logits, n_vocab_); ++i) {
                log(" %.7g", l[i]);
            }
            log("\n");
            ++summary_.rows;
        }
        for (const auto & t : batch) {
            for (int32_t s : t.seqs) {
                seq_tokens_[s][t.pos] = t.token;
            }
        }
        return true;
    }

    // Tokens of one sequence group, at explicit or continuing positions.
    std::vector<BatchToken> group_tokens(int32_t seq, const TokenList & list) {
        const auto toks = list.resolve(n_vocab_);
        // In 64 bits: a list may start near the top of the position range.
        int64_t pos = list.start_pos ? *list.start_pos : int64_t{ctx().seq_pos_max(seq)} + 1;
        if (!toks.empty() && pos + static_cast<int64_t>(toks.size()) - 1 > kMaxPos) {
            fail("positions " + std::to_string(pos) + ".." + std::to_string(pos + static_cast<int64_t>(toks.size()) - 1) +
                 " go past " + std::to_string(kMaxPos) + ", the last position the memory can continue");
        }
        std::vector<BatchToken> out;
        for (int32_t t : toks) {
            if (t < 0 || t >= n_vocab_) {
                fail("token " + std::to_string(t) + " is outside the vocabulary (0.." + std::to_string(n_vocab_ - 1) + ")");
            }
            BatchToken b;
            b.token = t;
            b.pos = static_cast<int32_t>(pos++);
            b.seqs = {seq};
            b.output = s_.outputs_all;
            out.push_back(std::move(b));
        }
        if (!out.empty() && !s_.outputs_all) {
            out.back().output = true;
        }
        return out;
    }

    // Runs `all` in calls of at most `chunk` tokens, continuing positions across calls.
    void decode_in_calls(int32_t seq, const TokenList & list, size_t chunk) {
        auto all = group_tokens(seq, list);
        for (size_t i = 0; i < all.size(); i += chunk) {
            std::vector<BatchToken> call(all.begin() + i, all.begin() + std::min(all.size(), i + chunk));
            for (auto & t : call) {
                t.output = s_.outputs_all;
            }
            call.back().output = true;
            if (!decode(call)) {
                return;
            }
        }
    }

    std::vector<int32_t> tokens_of(int32_t seq) const {
        std::vector<int32_t> out;
        if (auto it = seq_tokens_.find(seq); it != seq_tokens_.end()) {
            for (const auto & [pos, tok] : it->second) {
                out.push_back(tok);
            }
        }
        return out;
    }

    void forget_range(int32_t seq, int32_t p0, int32_t p1) {
        auto it = seq_tokens_.find(seq);
        if (it == seq_tokens_.end()) return;
        const int32_t lo = p0 < 0 ? 0 : p0;
        const int32_t hi = p1 < 0 ? INT32_MAX : p1;
        for (auto t = it->second.begin(); t != it->second.end();) {
            t = (t->first >= lo && t->first < hi) ? it->second.erase(t) : std::next(t);
        }
    }

    static uint64_t file_size(const std::string & path) {
        std::ifstream f(path, std::ios::binary | std::ios::ate);
        return f ? static_cast<uint64_t>(f.tellg()) : 0;
    }

    void save_state_file(const std::string & path, const std::vector<int32_t> & tokens, int32_t seq) {
        if (opt_.before_state_save) opt_.before_state_save(ctx());
        if (opt_.write_state_files) ctx().state_save_file(path, tokens, seq);
        if (opt_.after_state_save) opt_.after_state_save();
    }

    void run_command(const Command & c) {
        using K = Command::Kind;
        switch (c.kind) {
        case K::Set:
            set(c.text, c.value);
            return;
        case K::Recreate:
            create();
            return;
        case K::Echo:
            log("echo %s\n", c.text.c_str());
            return;
        case K::Unknown:
            log("# unknown command skipped: %s\n", c.text.c_str());
            std::fprintf(stderr, "%s:%d: unknown command skipped: %s\n", wl_.name.c_str(), line_, c.text.c_str());
            ++summary_.unknown;
            return;
        case K::Decode: {
            auto batch = group_tokens(c.seq, c.groups[0].second);
            decode(batch);
            return;
        }
        case K::DecodeEach:
            decode_in_calls(c.seq, c.groups[0].second, 1);
            return;
        case K::DecodeChunks:
            decode_in_calls(c.seq, c.groups[0].second, static_cast<size_t>(c.n));
            return;
        case K::MDecode: {
            std::vector<BatchToken> batch;
            for (const auto & [seq, list] : c.groups) {
                auto g = group_tokens(seq, list);
                batch.insert(batch.end(), g.begin(), g.end());
            }
            decode(batch);
            return;
        }
        case K::Batch: {
            std::vector<BatchToken> batch;
            for (const auto & e : c.entries) {
                if (e.seqs.empty()) fail("batch entry without a sequence");
                batch.push_back({e.token, e.pos, e.seqs, e.output});
            }
            decode(batch);
            return;
        }
        case K::Gen:
            for (int i = 0; i < c.n; ++i) {
                auto it = last_argmax_.find(c.seq);
                if (it == last_argmax_.end()) {
                    fail("gen " + std::to_string(c.seq) + ": no logits row for this sequence yet");
                }
                BatchToken t;
                t.token = it->second;
                if (ctx().seq_pos_max(c.seq) >= kMaxPos) fail("gen: sequence " + std::to_string(c.seq) + " is at the last position");
                t.pos = ctx().seq_pos_max(c.seq) + 1;
                t.seqs = {c.seq};
                t.output = true;
                if (!decode({t})) {
                    break;
                }
            }
            return;
        case K::Rm: {
            const bool ok = ctx().seq_rm(c.seq, c.p0, c.p1);
            if (ok) forget_range(c.seq, c.p0, c.p1);
            log("op rm %d %d %d -> %d\n", c.seq, c.p0, c.p1, ok ? 1 : 0);
            return;
        }
        case K::Cp:
            ctx().seq_cp(c.seq, c.seq2, c.p0, c.p1);
            if (auto it = last_argmax_.find(c.seq); it != last_argmax_.end()) {
                last_argmax_[c.seq2] = it->second;
            }
            seq_tokens_[c.seq2] = seq_tokens_[c.seq];
            log("op cp %d %d %d %d\n", c.seq, c.seq2, c.p0, c.p1);
            return;
        case K::Keep:
            ctx().seq_keep(c.seq);
            for (auto it = seq_tokens_.begin(); it != seq_tokens_.end();) {
                it = it->first == c.seq ? std::next(it) : seq_tokens_.erase(it);
            }
            log("op keep %d\n", c.seq);
            return;
        case K::Clear:
            ctx().clear();
            last_argmax_.clear();
            seq_tokens_.clear();
            log("op clear\n");
            return;
        case K::Pos:
            log("op pos %d min=%d max=%d\n", c.seq, ctx().seq_pos_min(c.seq), ctx().seq_pos_max(c.seq));
            return;
        case K::Add:
            ctx().seq_add(c.seq, c.p0, c.p1, c.delta);
            log("op add %d %d %d %d\n", c.seq, c.p0, c.p1, c.delta);
            return;
        case K::Div:
            ctx().seq_div(c.seq, c.p0, c.p1, c.delta);
            log("op div %d %d %d %d\n", c.seq, c.p0, c.p1, c.delta);
            return;
        case K::SaveState:
            save_state_file(c.name, tokens_of(c.seq), c.seq);
            log("op save-state %d %s -> %" PRIu64 "\n", c.seq, c.name.c_str(), file_size(c.name));
            return;
        case K::LoadState: {
            const auto toks = ctx().state_load_file(c.name, c.seq);
            auto & dst = seq_tokens_[c.seq];
            dst.clear();
            const int64_t p0 = int64_t{ctx().seq_pos_max(c.seq)} + 1 - static_cast<int64_t>(toks.size());
            for (size_t i = 0; i < toks.size(); ++i) dst[static_cast<int32_t>(p0 + static_cast<int64_t>(i))] = toks[i];
            log("op load-state %d %s -> %" PRIu64 " (tokens=%zu)\n", c.seq, c.name.c_str(), file_size(c.name), toks.size());
            return;
        }
        case K::SaveAll:
            save_state_file(c.name, {}, -1);
            log("op save-all %s -> %" PRIu64 "\n", c.name.c_str(), file_size(c.name));
            return;
        case K::LoadAll:
            ctx().state_load_file(c.name, -1);
            log("op load-all %s -> %" PRIu64 "\n", c.name.c_str(), file_size(c.name));
            return;
        case K::Snap:
            snaps_[c.name] = ctx().state_get(c.seq);
            log("op snap %s %d %d -> %zu\n", c.name.c_str(), c.seq, c.flags, snaps_[c.name].size());
            return;
        case K::Restore: {
            auto it = snaps_.find(c.name);
            if (it == snaps_.end()) fail("restore: no snapshot named '" + c.name + "'");
            ctx().state_set(it->second, c.seq);
            log("op restore %s %d %d -> %zu\n", c.name.c_str(), c.seq, c.flags, it->second.size());
            return;
        }
        }
    }

    std::shared_ptr<const Model> model_;
    const Workload & wl_;
    ReplayOptions opt_;
    int32_t n_vocab_;
    Settings s_;
    std::unique_ptr<Context> ctx_;
    std::unique_ptr<LogrecWriter> bin_;
    std::unique_ptr<AtomicFile> text_file_;
    std::FILE * text_ = nullptr;  // text_file_'s stream, stdout or none
    int line_ = 0;
    ReplaySummary summary_;
    std::map<int32_t, int32_t> last_argmax_;
    std::map<int32_t, std::map<int32_t, int32_t>> seq_tokens_;  // seq -> pos -> token, for state file headers
    std::map<std::string, std::vector<uint8_t>> snaps_;
};

}  // namespace

ReplaySummary replay(std::shared_ptr<const Model> model, const Workload & workload, const ReplayOptions & options) {
    Runner r(std::move(model), workload, options);
    return r.run();
}

}  // namespace offgrid::tools
