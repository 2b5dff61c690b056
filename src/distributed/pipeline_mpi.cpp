#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/data_hash.h"
#include "common/error.h"
#include "offgrid/distributed.h"
#include "distributed/split.h"
#include "distributed/world.h"
#include "gguf/reader.h"
#include "memory/hybrid_memory.h"
#include "model/architecture.h"
#include "model/registry.h"
#include "runtime/available_memory.h"
#include "runtime/context_access.h"
#include "runtime/fingerprint.h"

namespace offgrid::distributed {

namespace {

// Little-endian byte messages: what the ranks exchange.
class Writer {
public:
    template <typename T>
    void put(const T & v) {
        put_raw(&v, sizeof(T));
    }
    void put_raw(const void * p, size_t n) {
        if (n == 0) return;
        const size_t at = bytes.size();
        bytes.resize(at + n);
        std::memcpy(bytes.data() + at, p, n);
    }
    template <typename T>
    void put_vector(const std::vector<T> & v) {
        put<uint64_t>(v.size());
        put_raw(v.data(), v.size() * sizeof(T));
    }
    void put_string(const std::string & s) {
        put<uint64_t>(s.size());
        put_raw(s.data(), s.size());
    }
    std::vector<uint8_t> bytes;
};

class Reader {
public:
    Reader(const std::vector<uint8_t> & b, const World & w, const char * what) : b_(b), w_(w), what_(what) {}
    void get_raw(void * p, size_t n) {
        if (b_.size() - at_ < n) w_.abort(std::string(what_) + ": the message is cut short");
        std::memcpy(p, b_.data() + at_, n);
        at_ += n;
    }
    template <typename T>
    T get() {
        T v;
        get_raw(&v, sizeof(T));
        return v;
    }
    template <typename T>
    std::vector<T> get_vector() {
        const uint64_t n = get<uint64_t>();
        if (n > (b_.size() - at_) / sizeof(T)) w_.abort(std::string(what_) + ": the message is cut short");
        std::vector<T> v(n);
        get_raw(v.data(), n * sizeof(T));
        return v;
    }
    std::string get_string() {
        const std::vector<char> v = get_vector<char>();
        return std::string(v.begin(), v.end());
    }
    bool done() const { return at_ == b_.size(); }

private:
    const std::vector<uint8_t> & b_;
    const World & w_;
    const char * what_;
    size_t at_ = 0;
};

// A size line of /proc/self/status ("VmPeak:", "VmHWM:") in bytes; 0 when unknown.
uint64_t status_bytes(const char * field) {
    uint64_t kb = 0;
    if (std::FILE * f = std::fopen("/proc/self/status", "r")) {
        char line[256];
        const size_t n = std::strlen(field);
        while (std::fgets(line, sizeof line, f)) {
            if (std::strncmp(line, field, n) == 0) {
                kb = std::strtoull(line + n, nullptr, 10);
                break;
            }
        }
        std::fclose(f);
    }
    return kb * 1024;
}

// One rank's stage: the model loaded for this rank's layers only (its tensors mapped, the others' not), with
// forward() running that range in the pipeline.
class Stage final : public model::Architecture {
public:
    Stage(std::shared_ptr<const model::Architecture> part, Split split, World & world, uint64_t fingerprint)
        : part_(std::move(part)), m_(*part_), split_(std::move(split)), world_(world), fingerprint_(fingerprint) {}

    const std::string & name() const override { return m_.name(); }
    uint32_t n_vocab() const override { return m_.n_vocab(); }
    uint32_t n_ctx_train() const override { return m_.n_ctx_train(); }
    uint32_t n_layers() const override { return m_.n_layers(); }
    uint32_t carry_width() const override { return m_.carry_width(); }
    model::LayerCaches layer_caches(uint32_t il) const override { return m_.layer_caches(il); }
    bool holds_layer(uint32_t il) const override {
        const LayerRange & r = split_.ranges[static_cast<size_t>(world_.rank())];
        return il >= r.first && il < r.end;
    }
    uint32_t hidden_width() const override { return m_.hidden_width(); }
    uint32_t wide_hidden_width() const override { return m_.wide_hidden_width(); }
    const gguf::Reader & reader() const override { return m_.reader(); }
    uint64_t known_fingerprint() const override { return fingerprint_; }
    uint32_t agreed_context_size(uint32_t mine) const override {
        // The smallest of every rank's own choice (each chose from its own free memory and its own layers' rows).
        uint32_t agreed = mine;
        if (world_.rank() == 0) {
            for (int from = 1; from < world_.size(); ++from) {
                const std::vector<uint8_t> msg = world_.recv(from, kTagHello, "its context size");
                Reader r(msg, world_, "a context size");
                agreed = std::min(agreed, r.get<uint32_t>());
            }
            Writer w;
            w.put<uint32_t>(agreed);
            for (int to = 1; to < world_.size(); ++to) world_.send(to, kTagHello, w.bytes, "the context size");
            return agreed;
        }
        Writer w;
        w.put<uint32_t>(mine);
        world_.send(0, kTagHello, w.bytes, "its context size");
        const std::vector<uint8_t> msg = world_.recv(0, kTagHello, "the context size");
        Reader r(msg, world_, "the context size");
        return r.get<uint32_t>();
    }
    memory::CacheShape cache_shape(tensor::ElemType k, tensor::ElemType v) const override { return m_.cache_shape(k, v); }
    model::MemoryTraits memory_traits() const override { return m_.memory_traits(); }
    std::string check_token_seqs(const std::vector<memory::SeqId> & seqs) const override { return m_.check_token_seqs(seqs); }
    void rerotate_keys(const memory::CacheShape & shape, memory::Storage & storage, uint32_t cell, memory::Pos old_pos,
                       memory::Pos new_pos) const override {
        m_.rerotate_keys(shape, storage, cell, old_pos, new_pos);
    }
    std::string describe() const override { return m_.describe(); }
    uint64_t weight_bytes_per_token() const override { return m_.weight_bytes_per_token(); }

    ops::WorkspaceSize workspace_size(const model::WorkspaceLimits & limits) const override {
        return m_.workspace_size(limits);
    }

    // One ubatch through this rank's layers (offgrid/distributed.h). A ubatch that wants no result (no output row,
    // no hidden state) and is not the call's last is handed on without waiting: rank 0 starts the next
    // micro-batch of a prompt while the later ranks still run this one. The last rank answers every ubatch; the
    // others read those answers at the next ubatch that wants a result, which every call has (its last), so all
    // ranks learn of a failure at the same ubatch and throw it there together.
    void forward(const model::ForwardContext & fc) const override {
        const int r = world_.rank(), n = world_.size();
        const LayerRange range = split_.ranges[static_cast<size_t>(r)];
        const memory::Plan & plan = fc.plan;
        const size_t T = plan.tokens.size();
        const uint64_t step = step_++;
        size_t n_out = 0;
        for (const auto & t : plan.tokens) n_out += t.output ? 1 : 0;
        const bool wants_result = fc.last_of_call || n_out > 0 || fc.out.hidden || fc.out.wide_hidden;
        // What the head writes, as the runtime asked for it (the same on every rank).
        const size_t n_logits = fc.out.logits ? n_out * m_.n_vocab() : 0;
        const size_t n_hidden = fc.out.hidden ? T * m_.hidden_width() : 0;
        const size_t n_wide = fc.out.wide_hidden ? T * m_.wide_hidden_width() : 0;

        if (r > 0) {
            const std::vector<uint8_t> msg = world_.recv(r - 1, kTagCarry, "a ubatch's hidden state");
            Reader rd(msg, world_, "a ubatch's hidden state");
            check_step(rd.get<uint64_t>(), step, r - 1);
            if (rd.get<uint8_t>() != 0) {
                const std::string why = rd.get_string();
                if (failure_.empty()) failure_ = why;
            } else {
                carry_in_.streams = rd.get_vector<float>();
                carry_in_.side = rd.get_vector<uint32_t>();
            }
        }
        if (failure_.empty()) {
            model::ForwardContext stage = fc;
            stage.first_layer = range.first;
            stage.end_layer = range.end;
            stage.carry_in = r > 0 ? &carry_in_ : nullptr;
            stage.out.carry = r + 1 < n ? &carry_out_ : nullptr;
            const auto t0 = std::chrono::steady_clock::now();
            try {
                m_.forward(stage);
            } catch (const std::exception & e) {
                failure_ = e.what();
            }
            forward_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        if (r + 1 < n) {
            Writer w;
            w.put<uint64_t>(step);
            w.put<uint8_t>(failure_.empty() ? 0 : 1);
            if (failure_.empty()) {
                w.put_vector(carry_out_.streams);
                w.put_vector(carry_out_.side);
            } else {
                w.put_string(failure_);
            }
            world_.send(r + 1, kTagCarry, w.bytes, "a ubatch's hidden state");
            ++unanswered_;
            if (!wants_result) return;
            // The last rank's answers to every ubatch handed on since the last wait, in order; this one's last.
            for (; unanswered_ > 0; --unanswered_) {
                const std::vector<uint8_t> msg = world_.recv(n - 1, kTagResult, "a ubatch's logits");
                Reader rd(msg, world_, "a ubatch's logits");
                check_step(rd.get<uint64_t>(), step + 1 - unanswered_, n - 1);
                if (rd.get<uint8_t>() != 0) {
                    const std::string why = rd.get_string();
                    if (failure_.empty()) failure_ = why;
                } else if (unanswered_ == 1 && failure_.empty()) {
                    read_rows(rd, fc.out.logits, n_logits);
                    read_rows(rd, fc.out.hidden, n_hidden);
                    read_rows(rd, fc.out.wide_hidden, n_wide);
                }
            }
        } else if (n > 1) {
            Writer w;
            w.put<uint64_t>(step);
            w.put<uint8_t>(failure_.empty() ? 0 : 1);
            if (failure_.empty()) {
                w.put<uint64_t>(n_logits);
                w.put_raw(fc.out.logits, n_logits * sizeof(float));
                w.put<uint64_t>(n_hidden);
                w.put_raw(fc.out.hidden, n_hidden * sizeof(float));
                w.put<uint64_t>(n_wide);
                w.put_raw(fc.out.wide_hidden, n_wide * sizeof(float));
            } else {
                w.put_string(failure_);
            }
            for (int to = 0; to + 1 < n; ++to) world_.send(to, kTagResult, w.bytes, "a ubatch's logits");
        }
        if (!wants_result) return;
        if (!failure_.empty()) {
            const std::string why = failure_;
            failure_.clear();
            throw Error(why);
        }
    }

    std::string report() const {
        const World::Traffic & t = world_.traffic();
        const gguf::Reader & r = m_.reader();
        const auto mib = [](uint64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
        char line[400];
        std::snprintf(line, sizeof line,
                      "rank %d of %d: %llu ubatches, forward %.3f s, messages %.3f s (waits included), sent %.2f MiB "
                      "in %llu messages; maps %.2f of the file's %.2f MiB in %zu windows; peak address space %.1f "
                      "MiB, peak resident %.1f MiB",
                      world_.rank(), world_.size(), static_cast<unsigned long long>(step_), forward_seconds_,
                      t.wait_seconds, mib(t.bytes_sent), static_cast<unsigned long long>(t.messages_sent),
                      mib(r.mapped_bytes()), mib(r.file_size()), r.n_windows(), mib(status_bytes("VmPeak:")),
                      mib(status_bytes("VmHWM:")));
        return line;
    }

private:
    // n floats of the last rank's answer into `to` (the runtime's output buffer, the same size on every rank).
    void read_rows(Reader & rd, float * to, size_t n) const {
        if (rd.get<uint64_t>() != n) world_.abort("a ubatch's logits: the last rank's rows are not the size asked for");
        if (n > 0) rd.get_raw(to, n * sizeof(float));
    }

    void check_step(uint64_t got, uint64_t want, int from) const {
        if (got != want) {
            world_.abort("rank " + std::to_string(from) + " is at ubatch " + std::to_string(got) + ", this rank at " +
                         std::to_string(want) + ": the ranks do not run the same commands");
        }
    }

    std::shared_ptr<const model::Architecture> part_;
    const model::Architecture & m_;
    Split split_;
    World & world_;
    uint64_t fingerprint_;
    // A Context calls forward from one thread at a time (offgrid/context.h), so plain mutable state suffices.
    mutable uint64_t step_ = 0;        // ubatches run so far (every message carries its number)
    mutable uint64_t unanswered_ = 0;  // ubatches handed on whose answer from the last rank is not read yet
    mutable double forward_seconds_ = 0;  // time in this rank's layers
    mutable std::string failure_;      // the call's first failure, thrown at its next ubatch that wants a result
    mutable model::LayerCarry carry_in_, carry_out_;  // kept from ubatch to ubatch (their buffers only grow)
};

// The memory this rank may use for weights: what the system has available, or the room left under a limit of
// the process's address space (ulimit -v), whichever is less (runtime/available_memory.h). 0 means unknown, except
// under an address-space limit, where it means no room: then 1, so the fit check refuses any share.
uint64_t rank_capacity() {
    const uint64_t avail = runtime::available_memory_bytes();
    rlimit lim{};
    if (avail == 0 && getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) return 1;
    return avail;
}

// The rows of the layers in `range`, in layer order: K, V, indexer rows of an attention layer (every cell); conv
// and delta-state rows of a recurrent layer (every row); the per-row state with the layer that owns it.
template <typename Visit>
void visit_layer_rows(const model::Architecture & m, memory::HybridMemory & mem, const LayerRange & range, Visit visit) {
    const memory::CacheShape & shape = mem.params().shape;
    auto & kv = mem.kv();
    const size_t n_cells = kv.n_cells();
    const uint32_t n_rows = mem.has_recurrent() ? mem.recurrent().n_rows() : 0;
    for (uint32_t il = range.first; il < range.end; ++il) {
        const model::LayerCaches lc = m.layer_caches(il);
        if (lc.attn >= 0) {
            const auto a = static_cast<uint32_t>(lc.attn);
            visit(kv.k_row(a, 0), n_cells * kv.k_row_bytes(a));
            if (kv.v_row_bytes(a) > 0) visit(kv.v_row(a, 0), n_cells * kv.v_row_bytes(a));
            if (kv.idx_row_bytes(a) > 0) visit(kv.idx_row(a, 0), n_cells * kv.idx_row_bytes(a));
        }
        if (lc.recr >= 0) {
            const auto l = static_cast<uint32_t>(lc.recr);
            const memory::LayerCache & decl = shape.recr(l);
            for (uint32_t row = 0; row < n_rows; ++row) {
                visit(mem.conv_state(l, row), decl.conv_floats * sizeof(float));
                visit(mem.ssm_state(l, row), decl.state_floats * sizeof(float));
            }
        }
        if (lc.row_state && shape.row_floats > 0) {
            for (uint32_t row = 0; row < n_rows; ++row) visit(mem.row_state(row), shape.row_floats * sizeof(float));
        }
    }
}

// The model's fingerprint, as one process computes it from the whole file (runtime/fingerprint.h): each rank
// hashes the pieces of the tensors it maps (one thread: under an address-space limit a thread's stack may not
// fit), rank 0 takes every piece from the first rank that sent it and sends the folded value to every rank.
uint64_t agree_fingerprint(World & world, const gguf::Reader & reader) {
    const std::vector<runtime::HashPiece> pieces = runtime::fingerprint_pieces(reader);
    const auto & tensors = reader.tensors();
    Writer mine;
    for (size_t i = 0; i < pieces.size(); ++i) {
        const runtime::HashPiece & p = pieces[i];
        if (tensors[p.tensor].data == nullptr) continue;
        mine.put<uint64_t>(i);
        mine.put(data_hash(tensors[p.tensor].data + p.at, p.n));
    }
    if (world.rank() > 0) {
        world.send(0, kTagHello, mine.bytes, "its weights' hashes");
        const std::vector<uint8_t> msg = world.recv(0, kTagHello, "the model fingerprint");
        Reader rd(msg, world, "the model fingerprint");
        return rd.get<uint64_t>();
    }
    std::vector<LaneCrc> hashes(pieces.size());
    std::vector<bool> have(pieces.size(), false);
    const auto take = [&](const std::vector<uint8_t> & msg) {
        Reader rd(msg, world, "weights' hashes");
        while (!rd.done()) {
            const uint64_t i = rd.get<uint64_t>();
            const LaneCrc h = rd.get<LaneCrc>();
            if (i >= pieces.size()) world.abort("weights' hashes: a piece number past the file's pieces");
            if (!have[i]) hashes[i] = h;
            have[i] = true;
        }
    };
    take(mine.bytes);
    for (int from = 1; from < world.size(); ++from) take(world.recv(from, kTagHello, "its weights' hashes"));
    for (size_t i = 0; i < pieces.size(); ++i) {
        if (!have[i]) world.abort("tensor " + tensors[pieces[i].tensor].name + " is mapped by no rank");
    }
    uint64_t fp = runtime::fold_fingerprint(reader, hashes);
    if (fp == 0) fp = 1;  // 0 means "not computed" (Model::fingerprint)
    Writer w;
    w.put<uint64_t>(fp);
    for (int to = 1; to < world.size(); ++to) world.send(to, kTagHello, w.bytes, "the model fingerprint");
    return fp;
}

// What rank 0's memory held before a state save took every layer in (restored once the file is written).
struct HeldBefore {
    memory::HybridMemory * mem = nullptr;
    std::vector<bool> held;
    bool row_state_held = true;
};

// Before a state save: every rank sends its layers' rows to rank 0, whose memory takes in every layer for the
// time of the save (its own rows stay; the others' arrive), so it writes the one-process file.
void gather_rows(World & world, const Split & split, const model::Architecture & m, Context & ctx, HeldBefore & before) {
    memory::HybridMemory & mem = runtime::ContextAccess::memory(ctx);
    const int r = world.rank();
    if (r == 0 && before.mem != &mem) {
        before = {&mem, mem.params().held, mem.params().row_state_held};
        mem.hold_layers({}, true);
    }
    if (r > 0) {
        Writer w;
        visit_layer_rows(m, mem, split.ranges[static_cast<size_t>(r)], [&](const void * p, size_t n) { w.put_raw(p, n); });
        world.send(0, kTagState, w.bytes, "cache rows for a state save");
        return;
    }
    for (int from = 1; from < world.size(); ++from) {
        const std::vector<uint8_t> msg = world.recv(from, kTagState, "cache rows for a state save");
        Reader rd(msg, world, "cache rows for a state save");
        visit_layer_rows(m, mem, split.ranges[static_cast<size_t>(from)], [&](void * p, size_t n) { rd.get_raw(p, n); });
        if (!rd.done()) world.abort("cache rows from rank " + std::to_string(from) + ": the message is longer than this rank's caches");
    }
}

}  // namespace

bool under_launcher() { return World::launched(); }

Pipeline start_pipeline(const std::string & model_path, const PipelineOptions & options) {
    Pipeline p;
    if (!World::launched()) {
        // One process: the whole model; a split, if given, must be the one range of every layer.
        if (!options.split.empty() && options.split != "auto") {
            parse_split(options.split, trunk_layers(gguf::Reader::open(model_path)), 1);
        }
        p.model = Model::load(model_path);
        return p;
    }
    World & world = World::get();
    world.set_timeout(options.timeout);
    p.rank = world.rank();
    p.size = world.size();
    // Rank 0 gathers every rank's capacity, decides the split and tells every rank; then each rank checks its own
    // share against its memory, all before any weight is loaded (only the file's header and tensor table are read).
    Split split;
    // The header and tensor table only: nothing of the weights is mapped before the split is agreed and checked.
    gguf::Reader header = gguf::Reader::open_table(model_path);
    const uint64_t cap = rank_capacity();
    {
        const uint32_t n_layers = trunk_layers(header);
        const WeightBytes wb = weight_bytes(header, n_layers);
        if (p.rank == 0) {
            std::vector<uint64_t> caps(static_cast<size_t>(p.size), 0);
            caps[0] = cap;
            for (int from = 1; from < p.size; ++from) {
                const std::vector<uint8_t> msg = world.recv(from, kTagHello, "its memory size");
                Reader rd(msg, world, "its memory size");
                caps[static_cast<size_t>(from)] = rd.get<uint64_t>();
            }
            std::string text, error;
            try {
                if (options.split.empty() || options.split == "auto") {
                    for (uint64_t & c : caps) c = c == 0 ? 1 : c;  // unknown: counts as equal shares
                    split = auto_split(wb, caps);
                } else {
                    split = parse_split(options.split, n_layers, p.size);
                }
                text = split.describe();
            } catch (const std::exception & e) {
                error = e.what();
            }
            Writer w;
            w.put<uint8_t>(error.empty() ? 0 : 1);
            w.put_string(error.empty() ? text : error);
            for (int to = 1; to < p.size; ++to) world.send(to, kTagHello, w.bytes, "the split");
            if (!error.empty()) throw Error(error);
        } else {
            Writer w;
            w.put<uint64_t>(cap);
            world.send(0, kTagHello, w.bytes, "its memory size");
            const std::vector<uint8_t> msg = world.recv(0, kTagHello, "the split");
            Reader rd(msg, world, "the split");
            const bool failed = rd.get<uint8_t>() != 0;
            const std::string text = rd.get_string();
            if (failed) throw Error(text);
            split = parse_split(text, n_layers, p.size);
        }
    }
    p.split = split.describe();
    const LayerRange mine = split.ranges[static_cast<size_t>(p.rank)];
    p.layers = std::to_string(mine.first) + "-" + std::to_string(mine.end - 1);
    // This rank's share of the file: its layers' tensors, the embedding on the first rank, the head on the last
    // (model::tensors_for), each run of neighbouring tensors one mapping. The fit check counts exactly those
    // tensors (the balance above counts the PLE tables and a tied head with the last rank only).
    const model::LayerSpan span{mine.first, mine.end};
    const std::vector<bool> wanted = model::tensors_for(header, span);
    uint64_t need = 0;
    for (size_t k = 0; k < wanted.size(); ++k) need += wanted[k] ? header.tensors()[k].n_bytes : 0;
    if (cap != 0 && need > cap) world.abort(model_path + ": " + share_refusal(static_cast<size_t>(p.rank), mine, need, cap));
    // Read into memory of its own when the share takes at most half of what the rank has (as one process's load,
    // Model::resolve): the weights then sit in huge pages instead of the page cache's 4 KiB pages.
    const bool read = Model::resolve(WeightLoad::Auto, need, cap) == WeightLoad::Read;
    header.map_tensors(wanted, read ? gguf::LoadMode::Read : gguf::LoadMode::Map);
    std::shared_ptr<const model::Architecture> part = model::load_model(std::move(header), span);
    const uint64_t fingerprint = agree_fingerprint(world, part->reader());
    auto stage = std::make_shared<const Stage>(part, split, world, fingerprint);
    p.model = std::make_shared<const Model>(stage, model_path);
    auto before = std::make_shared<HeldBefore>();
    p.gather = [&world, split, part, before](Context & ctx) { gather_rows(world, split, *part, ctx, *before); };
    p.saved = [&world, before] {
        if (before->mem != nullptr) before->mem->hold_layers(before->held, before->row_state_held);
        before->mem = nullptr;
        world.barrier("the end of a state save");
    };
    p.meet = [&world] { world.barrier("a measurement's start or end"); };
    p.report = [stage] { return stage->report(); };
    return p;
}

void end_pipeline() { World::finalize(); }

}  // namespace offgrid::distributed
