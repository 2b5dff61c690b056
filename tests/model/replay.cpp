#include "replay.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "memory/state_io.h"
#include "model/forward.h"
#include "model/shift.h"

namespace offgrid::test {

namespace {

std::vector<std::string> split(const std::string & s, char sep) {
    std::vector<std::string> out;
    std::string cur;
    for (char c : s) {
        if (c == sep) {
            if (!cur.empty()) out.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    if (!cur.empty()) out.push_back(cur);
    return out;
}

// Comma-separated items whose parentheses may hold commas themselves: "rand(3,13),7" -> {"rand(3,13)", "7"}.
std::vector<std::string> split_items(const std::string & s) {
    std::vector<std::string> out;
    std::string cur;
    int depth = 0;
    for (char c : s) {
        if (c == '(') ++depth;
        if (c == ')') --depth;
        if (c == ',' && depth == 0) {
            if (!cur.empty()) out.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    if (!cur.empty()) out.push_back(cur);
    return out;
}

std::vector<std::string> words(const std::string & line) {
    std::istringstream in(line);
    std::vector<std::string> out;
    std::string w;
    while (in >> w) out.push_back(w);
    return out;
}

int32_t argmax(const std::vector<float> & v) {
    size_t best = 0;
    for (size_t i = 1; i < v.size(); ++i) if (v[i] > v[best]) best = i;
    return static_cast<int32_t>(best);
}

}  // namespace

std::vector<int32_t> Replay::tokens(const std::vector<std::string> & items, memory::Pos & first_pos) {
    const uint32_t V = model_.hparams().n_vocab;
    std::vector<int32_t> out;
    first_pos = -1;
    for (const std::string & it : items) {
        auto args = [&](const std::string & name) {
            const auto inner = it.substr(name.size() + 1, it.size() - name.size() - 2);
            const auto parts = split(inner, ',');
            std::vector<long long> v;
            for (const auto & p : parts) v.push_back(std::stoll(p));
            return v;
        };
        if (it[0] == '@') {
            first_pos = std::stoi(it.substr(1));
        } else if (it.rfind("rand(", 0) == 0) {
            const auto a = args("rand");
            const uint64_t A = 6364136223846793005ull, C = 1442695040888963407ull;
            uint64_t x = uint64_t(a[1]) * A + C;
            for (long long i = 0; i < a[0]; ++i) {
                x = x * A + C;
                out.push_back(static_cast<int32_t>(1 + (x >> 33) % (V - 1)));
            }
        } else if (it.rfind("range(", 0) == 0) {
            const auto a = args("range");
            for (long long t = a[0]; t < a[1]; ++t) out.push_back(static_cast<int32_t>(t % V));
        } else if (it.rfind("rep(", 0) == 0) {
            const auto a = args("rep");
            for (long long i = 0; i < a[0]; ++i) out.push_back(static_cast<int32_t>(a[1]));
        } else {
            out.push_back(std::stoi(it));
        }
    }
    return out;
}

void Replay::ensure_context() {
    if (mem_) return;
    auto get = [&](const std::string & k, uint32_t def) {
        auto it = settings_.find(k);
        return it == settings_.end() ? def : static_cast<uint32_t>(std::stoul(it->second));
    };
    const auto type = [&](const std::string & k) {
        auto it = settings_.find(k);
        return it != settings_.end() && it->second == "f32" ? tensor::ElemType::F32 : tensor::ElemType::F16;
    };
    shape_ = model_.cache_shape(type("type_k"), type("type_v"));
    memory::MemoryParams p;
    p.shape = shape_;
    uint32_t n_ctx = get("n_ctx", 0);
    if (n_ctx == 0) n_ctx = model_.hparams().n_ctx_train;
    p.n_ctx = n_ctx;
    p.n_seq_max = get("n_seq_max", 1);
    p.unified = get("unified", 0) != 0;
    p.n_rs_seq = get("n_rs_seq", 0);
    const uint32_t n_batch = get("n_batch", 0) ? get("n_batch", 0) : n_ctx;
    p.n_ubatch = std::min(get("n_ubatch", 512), n_batch);
    p.kpool = model_.hparams().kpool;
    p.by_order = true;
    p.n_vocab = model_.hparams().n_vocab;
    mem_ = std::make_unique<memory::HybridMemory>(p);
}

void Replay::decode(const memory::Batch & b) {
    ensure_context();
    const auto r = mem_->begin(b);
    if (r.status != memory::DecodeStatus::Ok) throw std::runtime_error("decode refused: " + r.message);
    std::map<uint32_t, ReplayRow> out;
    const uint32_t V = model_.hparams().n_vocab;
    while (mem_->has_next()) {
        const memory::Plan & plan = mem_->apply();
        const auto logits = model::forward(model_, shape_, plan, *mem_);
        size_t k = 0;
        for (const auto & tp : plan.tokens) {
            if (!tp.output) continue;
            out[tp.index] = {step_, tp.seq, tp.pos, tp.token,
                             std::vector<float>(logits.begin() + k * V, logits.begin() + (k + 1) * V)};
            ++k;
        }
    }
    const memory::ValidBatch vb = mem_->call_batch();
    mem_->finish();
    for (auto & [idx, row] : out) {
        for (int s = 0; s < memory::kMaxSeq; ++s) {
            if (vb.seqs[idx].test(s)) last_argmax_[s] = argmax(row.logits);
        }
        rows_.push_back(std::move(row));
    }
    ++step_;
}

void Replay::command(const std::vector<std::string> & f, std::vector<std::string> & lines, size_t & line_no) {
    const std::string & c = f[0];
    auto seq = [&](size_t i) { return std::stoi(f.at(i)); };
    if (c == "set") {
        if (f[1] == "outputs") outputs_all_ = f[2] == "all";
        else settings_[f[1]] = f[2];
    } else if (c == "echo" || c == "pos") {
        if (c == "pos") ensure_context();
    } else if (c == "recreate") {
        mem_.reset();
        last_argmax_.clear();
    } else if (c == "decode" || c == "decode-each" || c == "decode-chunks") {
        const size_t first = c == "decode-chunks" ? 2 : 1;
        const size_t chunk = c == "decode-chunks" ? std::stoul(f[1]) : 0;
        const int s = seq(first);
        memory::Pos p0;
        const auto toks = tokens({f.begin() + first + 1, f.end()}, p0);
        const size_t per = c == "decode" ? toks.size() : (c == "decode-each" ? 1 : chunk);
        for (size_t i = 0; i < toks.size(); i += per) {
            const size_t n = std::min(per, toks.size() - i);
            memory::Batch b;
            b.tokens.assign(toks.begin() + i, toks.begin() + i + n);
            b.seqs.assign(n, {s});
            if (p0 >= 0) {
                for (size_t j = 0; j < n; ++j) b.pos.push_back(p0 + memory::Pos(i + j));
            }
            b.output.assign(n, outputs_all_ ? 1 : 0);
            b.output.back() = 1;
            decode(b);
        }
    } else if (c == "mdecode") {
        memory::Batch b;
        for (size_t i = 1; i < f.size(); ++i) {
            const auto colon = f[i].find(':');
            const int s = std::stoi(f[i].substr(0, colon));
            memory::Pos p0;
            const auto toks = tokens(split_items(f[i].substr(colon + 1)), p0);
            if (p0 >= 0) throw std::runtime_error("mdecode with @POS is not supported by this test replay");
            for (size_t j = 0; j < toks.size(); ++j) {
                b.tokens.push_back(toks[j]);
                b.seqs.push_back({s});
                b.output.push_back(outputs_all_ || j + 1 == toks.size() ? 1 : 0);
            }
        }
        decode(b);
    } else if (c == "batch") {
        memory::Batch b;
        for (++line_no; line_no < lines.size(); ++line_no) {
            const auto w = words(lines[line_no].substr(0, lines[line_no].find('#')));
            if (w.empty()) continue;
            if (w[0] == "end") break;
            b.tokens.push_back(std::stoi(w[0]));
            b.pos.push_back(std::stoi(w[1]));
            std::vector<memory::SeqId> ss;
            for (const auto & x : split(w[2], ',')) ss.push_back(std::stoi(x));
            b.seqs.push_back(ss);
            b.output.push_back(w.size() > 3 ? static_cast<uint8_t>(std::stoi(w[3])) : 1);
        }
        decode(b);
    } else if (c == "gen") {
        const int s = seq(1);
        for (int i = 0; i < std::stoi(f[2]); ++i) {
            memory::Batch b;
            b.tokens = {last_argmax_.at(s)};
            b.seqs = {{s}};
            b.output = {1};
            decode(b);
        }
    } else if (c == "rm") {
        ensure_context();
        mem_->seq_rm(seq(1), std::stoi(f[2]), std::stoi(f[3]));
    } else if (c == "cp") {
        ensure_context();
        mem_->seq_cp(seq(1), seq(2));
        if (last_argmax_.count(seq(1))) last_argmax_[seq(2)] = last_argmax_[seq(1)];
    } else if (c == "keep") {
        ensure_context();
        mem_->seq_keep(seq(1));
    } else if (c == "clear") {
        ensure_context();
        mem_->clear();
        last_argmax_.clear();
    } else if (c == "save-state" || c == "snap") {
        ensure_context();
        files_[f[2]] = memory::state_save(*mem_, seq(c == "snap" ? 2 : 1));
    } else if (c == "load-state" || c == "restore") {
        ensure_context();
        memory::state_load(*mem_, files_.at(f[2]), seq(c == "restore" ? 2 : 1));
    } else if (c == "save-all") {
        ensure_context();
        files_[f[1]] = memory::state_save(*mem_, -1);
    } else if (c == "load-all") {
        ensure_context();
        memory::state_load(*mem_, files_.at(f[1]), -1);
    } else {
        throw std::runtime_error("replay: unknown command " + c);
    }
}

void Replay::run_script(const std::string & path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open " + path);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    for (size_t i = 0; i < lines.size(); ++i) {
        const auto f = words(lines[i].substr(0, lines[i].find('#')));
        if (!f.empty()) command(f, lines, i);
    }
}

}  // namespace offgrid::test
