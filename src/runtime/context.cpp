// The public context: a model, the hybrid memory sized for it, and the decode loop that drives them
// (memory.begin -> per ubatch apply + forward -> finish, or undo on failure).
#include "offgrid/context.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <thread>


#include "common/crc32c.h"
#include "common/data_hash.h"
#include "common/error.h"
#include "common/files.h"
#include "gguf/reader.h"
#include "memory/hybrid_memory.h"
#include "memory/plan_check.h"
#include "runtime/available_memory.h"
#include "runtime/context_access.h"
#include "runtime/fingerprint.h"
#include "memory/state_io.h"
#include "model/architecture.h"
#include "model/registry.h"
#include "ops/thread_pool.h"

namespace offgrid {

static_assert(kMaxThreads == ops::ThreadPool::kMaxThreads, "the public thread limit is the pool's");

// ---------------------------------------------------------------- Model

Model::Model(std::shared_ptr<const model::Architecture> impl, std::string path)
    : impl_(std::move(impl)), path_(std::move(path)) {}

WeightLoad Model::resolve(WeightLoad how, uint64_t file_bytes, uint64_t available_bytes) {
    if (how != WeightLoad::Auto) return how;
    return available_bytes > 0 && file_bytes <= available_bytes / 2 ? WeightLoad::Read : WeightLoad::Map;
}

std::shared_ptr<const Model> Model::load(const std::string & path, WeightLoad how) {
    if (how == WeightLoad::Auto) {
        std::error_code ec;
        const auto bytes = std::filesystem::file_size(path, ec);
        // Unknown size (missing file, not regular): Map, and the reader says what is wrong.
        how = ec ? WeightLoad::Map : resolve(how, bytes, runtime::available_memory_bytes());
    }
    const gguf::LoadMode mode = how == WeightLoad::Read ? gguf::LoadMode::Read : gguf::LoadMode::Map;
    std::shared_ptr<const model::Architecture> m = model::load_model(gguf::Reader::open(path, mode));
    return std::make_shared<const Model>(std::move(m), path);
}

int32_t Model::n_vocab() const { return static_cast<int32_t>(impl_->n_vocab()); }
uint32_t Model::n_ctx_train() const { return impl_->n_ctx_train(); }
const std::string & Model::path() const { return path_; }
const std::string & Model::architecture() const { return impl_->name(); }
uint32_t Model::n_embd() const { return impl_->hidden_width(); }
std::string Model::describe() const { return impl_->describe(); }
uint64_t Model::weight_bytes_per_token() const { return impl_->weight_bytes_per_token(); }

namespace {

// FNV-1a, 64 bits: folds the metadata, the tensor table and the per-piece data hashes into one value.
struct Fnv {
    uint64_t h = 1469598103934665603ull;
    void mix(const void * p, size_t n) {
        const auto * b = static_cast<const unsigned char *>(p);
        for (size_t i = 0; i < n; ++i) {
            h ^= b[i];
            h *= 1099511628211ull;
        }
    }
    template <typename T>
    void mix_value(const T & v) { mix(&v, sizeof(T)); }
    void mix_string(const std::string & s) {
        mix_value(static_cast<uint64_t>(s.size()));
        mix(s.data(), s.size());
    }
};

void mix_gguf_value(Fnv & f, const gguf::Value & v) {
    f.mix_value(static_cast<uint32_t>(v.type));
    switch (v.type) {
        case gguf::ValueType::STRING: f.mix_string(v.s); break;
        case gguf::ValueType::F32:
        case gguf::ValueType::F64: f.mix_value(v.f); break;
        case gguf::ValueType::I8:
        case gguf::ValueType::I16:
        case gguf::ValueType::I32:
        case gguf::ValueType::I64: f.mix_value(v.i); break;
        case gguf::ValueType::ARRAY:
            f.mix_value(static_cast<uint32_t>(v.elem_type));
            f.mix_value(static_cast<uint64_t>(v.array.size()));
            if (v.array.is_packed()) {
                const auto bytes = v.array.packed_bytes();
                f.mix(bytes.data(), bytes.size());
            } else {
                for (size_t i = 0; i < v.array.size(); ++i) mix_gguf_value(f, v.array.at(i));
            }
            break;
        default: f.mix_value(v.u); break;  // unsigned integers and bools
    }
}

// Whether a metadata key takes part in the model's identity: everything but the descriptive `general.*` keys
// (name, author, license, ...), of which only general.architecture changes what runs. Hyperparameters
// (ARCH.*) and the tokenizer (tokenizer.*) count, and so does any key a later architecture adds.
bool identity_key(const std::string & key) {
    return key == "general.architecture" || key.rfind("general.", 0) != 0;
}

constexpr uint64_t kHashPiece = 32ull << 20;  // unit of work of the parallel data hash

}  // namespace

namespace runtime {

std::vector<HashPiece> fingerprint_pieces(const gguf::Reader & reader) {
    std::vector<HashPiece> pieces;
    const auto & tensors = reader.tensors();
    for (size_t k = 0; k < tensors.size(); ++k) {
        const uint64_t n = tensors[k].n_bytes;
        for (uint64_t at = 0; at < n; at += kHashPiece) pieces.push_back({k, at, std::min(kHashPiece, n - at)});
    }
    return pieces;
}

uint64_t fold_fingerprint(const gguf::Reader & reader, const std::vector<LaneCrc> & piece_hashes) {
    Fnv f;
    for (const auto & kv : reader.metadata()) {
        if (!identity_key(kv.key)) continue;
        f.mix_string(kv.key);
        mix_gguf_value(f, kv.value);
    }
    size_t p = 0;
    for (const auto & t : reader.tensors()) {
        f.mix_string(t.name);
        f.mix_value(static_cast<uint64_t>(t.ne.size()));
        f.mix(t.ne.data(), t.ne.size() * sizeof(int64_t));
        f.mix_value(static_cast<uint32_t>(t.type));
        f.mix_value(t.n_bytes);
        for (uint64_t at = 0; at < t.n_bytes; at += kHashPiece) f.mix_value(piece_hashes.at(p++));
    }
    return f.h;
}

uint64_t compute_fingerprint(const gguf::Reader & reader) {
    // Every byte of every tensor: pieces hashed on all hardware threads, folded in tensor order so the value does
    // not depend on the number of threads.
    const std::vector<HashPiece> pieces = fingerprint_pieces(reader);
    std::vector<LaneCrc> hashes(pieces.size());
    const auto & tensors = reader.tensors();
    std::atomic<size_t> next{0};
    auto work = [&] {
        for (size_t i; (i = next.fetch_add(1)) < pieces.size();) {
            hashes[i] = data_hash(tensors[pieces[i].tensor].data + pieces[i].at, pieces[i].n);
        }
    };
    const unsigned n_threads = std::clamp(std::thread::hardware_concurrency(), 1u, 16u);
    std::vector<std::thread> threads;
    for (unsigned i = 1; i < n_threads && i < pieces.size(); ++i) threads.emplace_back(work);
    work();
    for (auto & t : threads) t.join();
    return fold_fingerprint(reader, hashes);
}

}  // namespace runtime

uint64_t Model::fingerprint() const {
    // Computed on first use (state files, cache files), not at load: a run that never needs it pays nothing.
    // Two threads racing here compute the same value. A model that holds part of the data (a pipeline rank)
    // knows the value from all parts.
    uint64_t fp = fingerprint_.load(std::memory_order_acquire);
    if (fp == 0) fp = impl_->known_fingerprint();
    if (fp == 0) {
        fp = runtime::compute_fingerprint(impl_->reader());
        if (fp == 0) fp = 1;  // 0 means "not computed yet"
        fingerprint_.store(fp, std::memory_order_release);
    }
    return fp;
}

std::string Model::metadata_string(const std::string & key) const {
    const gguf::Value * v = impl_->reader().find(key);
    if (v == nullptr || v->type != gguf::ValueType::STRING) return {};
    return v->s;
}

std::string MemoryBreakdown::describe() const {
    auto mib = [](uint64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
    char buf[256];
    std::snprintf(buf, sizeof(buf), "attention %.2f MiB, recurrent %.2f MiB, indexer %.2f MiB", mib(attention_bytes),
                  mib(recurrent_bytes), mib(indexer_bytes));
    return buf;
}

namespace runtime {

namespace {

tensor::ElemType cache_type(const std::string & name, const char * what) {
    if (name == "f32") return tensor::ElemType::F32;
    if (name == "f16") return tensor::ElemType::F16;
    if (name == "q8_0") return tensor::ElemType::Q8_0;
    throw Error(std::string(what) + ": unsupported cache type '" + name + "' (f32, f16 or q8_0)");
}

constexpr char kFileMagic[8] = {'O', 'G', 'S', 'T', 'A', 'T', 'E', '1'};
constexpr uint32_t kFileVersion = 2;  // 2: header checksum (and memory states with checksums)

// The most cells a context takes: positions are int32 and the padding to 256 must not wrap.
constexpr uint32_t kMaxContextCells = 1u << 30;

}  // namespace

class ContextImpl {
public:
    ContextImpl(std::shared_ptr<const Model> model, const ContextParams & in)
        : model_(std::move(model)), params_(in), pool_(in.n_threads > 0 ? in.n_threads : 1) {
        const model::Architecture & m = model_->impl();
        if (params_.n_seq_max == 0 || params_.n_seq_max > static_cast<uint32_t>(memory::kMaxSeq)) {
            throw Error("n_seq_max must be in 1.." + std::to_string(memory::kMaxSeq));
        }
        const uint32_t n_ctx_train = m.n_ctx_train();
        if (n_ctx_train == 0) throw Error(model_->path() + ": context_length is 0");
        if (n_ctx_train > kMaxContextCells) {
            throw Error(model_->path() + ": context_length " + std::to_string(n_ctx_train) + " is larger than " +
                        std::to_string(kMaxContextCells) + " cells, more than this engine supports");
        }
        if (params_.n_ctx > kMaxContextCells) {
            throw Error("n_ctx " + std::to_string(params_.n_ctx) + " is larger than " + std::to_string(kMaxContextCells));
        }
        const uint32_t n_ctx = params_.n_ctx == 0 ? m.agreed_context_size(default_n_ctx(n_ctx_train)) : params_.n_ctx;
        const uint32_t per_stream = memory::cells_per_stream(n_ctx, params_.n_seq_max, params_.unified);
        params_.n_ctx = params_.unified ? per_stream : per_stream * params_.n_seq_max;
        params_.n_batch = params_.n_batch == 0 ? params_.n_ctx : std::min(params_.n_batch, params_.n_ctx);
        params_.n_ubatch = std::min(params_.n_ubatch == 0 ? 512u : params_.n_ubatch, params_.n_batch);
        params_.n_threads = pool_.n_threads();

        try {
            mem_ = std::make_unique<memory::HybridMemory>(memory_params(params_.n_ctx, params_.n_ubatch));
            // The forward's scratch, once for the largest ubatch and the longest sequence this context can hold.
            model::WorkspaceLimits limits;
            limits.n_ubatch = params_.n_ubatch;
            limits.n_seq_cells = per_stream;
            limits.n_threads = pool_.n_threads();
            workspace_.reserve(pool_.n_threads(), model::forward_workspace_size(m, limits));
        } catch (const std::bad_alloc &) {
            throw Error("not enough memory for a context of " + std::to_string(params_.n_ctx) +
                        " cells; ask for fewer (n_ctx, -c)");
        }
        plan_limits_ = {m.n_vocab(), m.memory_traits().kpool};
    }

    memory::MemoryParams memory_params(uint32_t n_ctx, uint32_t n_ubatch) {
        const model::Architecture & m = model_->impl();
        shape_ = m.cache_shape(cache_type(params_.type_k, "type_k"), cache_type(params_.type_v, "type_v"));
        memory::MemoryParams mp;
        mp.shape = shape_;
        mp.n_ctx = n_ctx;  // all cells; the memory gives each per-sequence stream n_ctx / n_seq_max
        mp.n_seq_max = params_.n_seq_max;
        mp.unified = params_.unified;
        mp.n_rs_seq = params_.n_rs_seq;
        mp.n_ubatch = n_ubatch;
        const model::MemoryTraits traits = m.memory_traits();
        mp.kpool = traits.kpool;
        mp.by_order = traits.kpool_by_order;
        mp.window = traits.window;
        mp.n_vocab = m.n_vocab();
        // A pipeline rank's memory stores its own layers' rows only (the others keep their place in the books).
        std::vector<bool> held;
        bool all = true;
        for (uint32_t il = 0; il < shape_.layers.size(); ++il) {
            held.push_back(il >= m.n_layers() || m.holds_layer(il));
            all = all && held.back();
        }
        if (!all) {
            for (uint32_t il = 0; il < m.n_layers() && il < held.size(); ++il)
                if (m.layer_caches(il).row_state) mp.row_state_held = held[il];
            mp.held = std::move(held);
        }
        return mp;
    }

    // The default context: the model's length, or less when its caches would take more than half of the
    // memory available now (callers ask for more with an explicit n_ctx). The bytes per cell are measured on a
    // small memory of the same shape, so they follow whatever the caches hold.
    uint32_t default_n_ctx(uint32_t n_ctx_train) {
        const uint64_t available = runtime::available_memory_bytes();
        if (available == 0) return n_ctx_train;
        const uint32_t probe_cells = 256 * params_.n_seq_max;
        const auto per_cell_bytes = [&] {
            memory::HybridMemory probe(memory_params(probe_cells, std::min(params_.n_ubatch == 0 ? 512u : params_.n_ubatch, 256u)));
            uint64_t bytes = 0;
            for (const auto & e : probe.breakdown())
                if (e.cache != "recurrent") bytes += e.bytes;
            return std::max<uint64_t>(1, bytes / probe_cells);
        }();
        const uint64_t budget = available / 2;
        if (static_cast<uint64_t>(n_ctx_train) * per_cell_bytes <= budget) return n_ctx_train;
        const uint64_t fits = budget / per_cell_bytes / 256 * 256;
        return static_cast<uint32_t>(std::max<uint64_t>(256 * params_.n_seq_max, fits));
    }

    DecodeResult decode(const std::vector<BatchToken> & in) {
        logits_.clear();
        n_outputs_ = 0;
        embd_.clear();
        embd_seq_.clear();
        wide_.clear();
        if (in.empty()) {
            return {DecodeStatus::InvalidBatch, "batch: empty"};
        }
        if (in.size() > params_.n_batch) {
            return {DecodeStatus::InvalidBatch, "batch: " + std::to_string(in.size()) + " tokens, more than n_batch " +
                                                    std::to_string(params_.n_batch)};
        }
        // The memory's copy of the batch, in buffers kept from call to call.
        memory::Batch & b = batch_;
        b.tokens.clear();
        b.pos.clear();
        b.output.clear();
        // One sequence list per token: lists beyond this batch's tokens wait in spare_seq_lists_ with their
        // capacity, so a batch as long as an earlier one allocates none.
        while (b.seqs.size() > in.size()) {
            spare_seq_lists_.push_back(std::move(b.seqs.back()));
            b.seqs.pop_back();
        }
        while (b.seqs.size() < in.size()) {
            if (spare_seq_lists_.empty()) {
                b.seqs.emplace_back();
            } else {
                b.seqs.push_back(std::move(spare_seq_lists_.back()));
                spare_seq_lists_.pop_back();
            }
        }
        const bool auto_pos = in[0].pos < 0;
        for (size_t i = 0; i < in.size(); ++i) {
            const auto & t = in[i];
            if ((t.pos < 0) != auto_pos) {
                return {DecodeStatus::InvalidBatch,
                        "batch: token " + std::to_string(i) + ": positions must be all given or all automatic"};
            }
            const std::string why = model_->impl().check_token_seqs(t.seqs);
            if (!why.empty()) return {DecodeStatus::InvalidBatch, "batch: token " + std::to_string(i) + ": " + why};
            b.tokens.push_back(t.token);
            if (!auto_pos) b.pos.push_back(t.pos);
            b.seqs[i].assign(t.seqs.begin(), t.seqs.end());
            b.output.push_back(t.output ? 1 : 0);
        }
        apply_shifts();

        const memory::BeginResult br = mem_->begin(b);
        if (br.status == memory::DecodeStatus::InvalidBatch) return {DecodeStatus::InvalidBatch, br.message};
        if (br.status == memory::DecodeStatus::NoSpace) return {DecodeStatus::NoSpace, br.message};

        // Output rows go back in batch order; a ubatch reorders tokens by sequence.
        const auto & vb = mem_->call_batch();
        std::vector<int32_t> & row_of = row_of_;
        row_of.assign(vb.size(), -1);
        int32_t n_out = 0;
        for (size_t i = 0; i < vb.size(); ++i) {
            if (vb.output[i]) row_of[i] = n_out++;
        }
        const size_t n_vocab = static_cast<size_t>(model_->n_vocab());
        // The next logits are written into the buffer of the ones before the last call (kept, so a decode step
        // of many sequences does not map and fault in fresh pages every call); every row is written below.
        std::vector<float> & rows = spare_logits_;
        rows.resize(static_cast<size_t>(n_out) * n_vocab);
        const size_t n_embd = model_->impl().hidden_width();
        std::vector<float> & hidden = batch_hidden_;  // batch order, every row written below
        hidden.resize(params_.embeddings ? vb.size() * n_embd : 0);
        const size_t n_wide = params_.mtp_hidden ? model_->impl().wide_hidden_width() : 0;
        std::vector<float> & wide = spare_wide_;  // batch order, every row written below
        wide.resize(vb.size() * n_wide);

        try {
            while (mem_->has_next()) {
                if (abort_requested()) {
                    mem_->undo();
                    return {DecodeStatus::Aborted, "decode: aborted by the callback"};
                }
                const memory::Plan & plan = mem_->apply();
                memory::check_plan(plan, plan_limits_, plan_seen_);
                const size_t T = plan.tokens.size();
                size_t n_plan_out = 0;
                for (const auto & t : plan.tokens) n_plan_out += t.output ? 1 : 0;
                // Ubatch-order rows, in buffers that only grow (a steady decode step allocates nothing).
                auto rows_of = [](std::vector<float> & v, size_t n) {
                    if (v.size() < n) v.resize(n);
                    return n > 0 ? v.data() : nullptr;
                };
                model::ForwardContext fc{shape_, plan, *mem_, &pool_, workspace_, params_.qsa_dense, {}};
                fc.out.logits = rows_of(ubatch_logits_, n_plan_out * n_vocab);
                fc.out.hidden = params_.embeddings ? rows_of(ubatch_hidden_, T * n_embd) : nullptr;
                fc.out.wide_hidden = n_wide > 0 ? rows_of(ubatch_wide_, T * n_wide) : nullptr;
                fc.last_of_call = !mem_->has_next();
                workspace_.reset();
                {
                    const ops::Workspace::Bind bind(workspace_);
                    model_->impl().forward(fc);
                }
                const float * out = fc.out.logits;
                if (params_.embeddings) {
                    for (size_t t = 0; t < T; ++t) {
                        std::memcpy(&hidden[plan.tokens[t].index * n_embd], &fc.out.hidden[t * n_embd], n_embd * sizeof(float));
                    }
                }
                for (size_t t = 0; t < T && n_wide > 0; ++t) {
                    std::memcpy(&wide[plan.tokens[t].index * n_wide], &fc.out.wide_hidden[t * n_wide], n_wide * sizeof(float));
                }
                size_t k = 0;
                for (const auto & t : plan.tokens) {
                    if (!t.output) continue;
                    const int32_t r = row_of[t.index];
                    std::memcpy(&rows[static_cast<size_t>(r) * n_vocab], &out[k * n_vocab], n_vocab * sizeof(float));
                    ++k;
                }
            }
        } catch (const std::exception & e) {
            mem_->undo();
            return {DecodeStatus::Failed, std::string("decode: ") + e.what()};
        } catch (...) {
            mem_->undo();
            return {DecodeStatus::Failed, "decode: failed with an exception of unknown type"};
        }
        if (params_.embeddings) pool_embeddings(vb, hidden, n_embd);  // vb lives until finish()
        mem_->finish();
        std::swap(logits_, rows);
        n_outputs_ = n_out;
        std::swap(wide_, wide);
        return {};
    }

    // Pooling None: the output tokens' rows in batch order. Otherwise per sequence: the mean (summed in batch
    // order, then divided), the last or the first of its tokens.
    void pool_embeddings(const memory::ValidBatch & vb, const std::vector<float> & hidden, size_t n_embd) {
        if (params_.pooling == Pooling::None) {
            for (size_t i = 0; i < vb.size(); ++i) {
                if (vb.output[i]) embd_.insert(embd_.end(), &hidden[i * n_embd], &hidden[(i + 1) * n_embd]);
            }
            return;
        }
        std::map<int32_t, std::pair<std::vector<double>, size_t>> acc;
        for (size_t i = 0; i < vb.size(); ++i) {
            for (size_t s = memory::seq_begin(vb.seqs[i]); s < vb.seqs[i].size(); s = memory::seq_next(vb.seqs[i], s)) {
                auto & [sum, n] = acc[static_cast<int32_t>(s)];
                sum.resize(n_embd, 0.0);
                const float * h = &hidden[i * n_embd];
                if (params_.pooling == Pooling::Mean) {
                    for (size_t j = 0; j < n_embd; ++j) sum[j] += h[j];
                } else if (params_.pooling == Pooling::Last || n == 0) {
                    for (size_t j = 0; j < n_embd; ++j) sum[j] = h[j];
                }
                ++n;
            }
        }
        for (auto & [s, v] : acc) {
            std::vector<float> row(n_embd);
            const double div = params_.pooling == Pooling::Mean ? static_cast<double>(v.second) : 1.0;
            for (size_t j = 0; j < n_embd; ++j) row[j] = static_cast<float>(v.first[j] / div);
            embd_seq_[s] = std::move(row);
        }
    }

    // The callback's answer; one that throws (anything at all) counts as a request to abort, so the call is
    // undone and the context stays usable.
    bool abort_requested() {
        if (!abort_) return false;
        try {
            return abort_();
        } catch (...) {
            return true;
        }
    }

    void apply_shifts() {
        if (!mem_->has_pending_shift()) return;
        mem_->apply_pending_shifts([&](uint32_t cell, memory::Pos old_pos, memory::Pos new_pos) {
            model_->impl().rerotate_keys(shape_, *mem_, cell, old_pos, new_pos);
        });
    }

    std::shared_ptr<const Model> model_;
    ContextParams params_;
    ops::ThreadPool pool_;
    memory::CacheShape shape_;
    std::unique_ptr<memory::HybridMemory> mem_;
    ops::Workspace workspace_;            // the forward's scratch (model::Architecture::workspace_size)
    memory::PlanLimits plan_limits_;
    std::vector<uint8_t> plan_seen_;      // memory::check_plan's working space
    memory::Batch batch_;                 // decode's copy of the batch for the memory
    std::vector<std::vector<int32_t>> spare_seq_lists_;  // batch_'s sequence lists not in use by this call
    std::vector<int32_t> row_of_;         // decode's output row of each batch token
    std::vector<float> ubatch_logits_, ubatch_hidden_, ubatch_wide_;  // one ubatch's rows, ubatch order
    std::vector<float> batch_hidden_;     // embeddings: every token's hidden state of the call, batch order
    std::function<bool()> abort_;
    std::vector<float> logits_;
    std::vector<float> spare_logits_;  // the buffer the next decode writes into (swapped with logits_)
    int32_t n_outputs_ = 0;
    std::vector<float> embd_;                          // pooling None: output rows
    std::map<int32_t, std::vector<float>> embd_seq_;   // pooled, per sequence
    std::vector<float> wide_;                          // mtp_hidden: every token's wide residual, batch order
    std::vector<float> spare_wide_;                    // the buffer the next decode writes into (swapped with wide_)
};

}  // namespace runtime

namespace runtime {
memory::HybridMemory & ContextAccess::memory(Context & ctx) { return *ctx.impl_->mem_; }
}  // namespace runtime

// ---------------------------------------------------------------- Context

Context::Context(std::shared_ptr<const Model> model, const ContextParams & params)
    : impl_(std::make_unique<runtime::ContextImpl>(std::move(model), params)) {}
Context::~Context() = default;

const Model & Context::model() const { return *impl_->model_; }
const ContextParams & Context::params() const { return impl_->params_; }
DecodeResult Context::decode(const std::vector<BatchToken> & batch) { return impl_->decode(batch); }
void Context::set_abort_callback(std::function<bool()> cb) { impl_->abort_ = std::move(cb); }
int32_t Context::n_outputs() const { return impl_->n_outputs_; }

const float * Context::logits(int32_t i) const {
    if (i < 0 || i >= impl_->n_outputs_) {
        throw Error("logits: row " + std::to_string(i) + " out of range (" + std::to_string(impl_->n_outputs_) + " rows)");
    }
    return impl_->logits_.data() + static_cast<size_t>(i) * static_cast<size_t>(impl_->model_->n_vocab());
}

const float * Context::embeddings(int32_t i) const {
    if (!impl_->params_.embeddings) throw Error("embeddings: the context was created without embeddings");
    if (impl_->params_.pooling != Pooling::None) throw Error("embeddings: pooled per sequence (embeddings_seq)");
    const size_t w = impl_->model_->n_embd();
    if (i < 0 || static_cast<size_t>(i) * w >= impl_->embd_.size()) {
        throw Error("embeddings: row " + std::to_string(i) + " out of range (" + std::to_string(impl_->embd_.size() / w) + " rows)");
    }
    return impl_->embd_.data() + static_cast<size_t>(i) * w;
}

uint32_t Context::mtp_hidden_width() const { return impl_->model_->impl().wide_hidden_width(); }

const float * Context::mtp_hidden(int32_t i) const {
    if (!impl_->params_.mtp_hidden) throw Error("mtp_hidden: the context was created without mtp_hidden");
    const size_t w = mtp_hidden_width();
    if (w == 0) throw Error("mtp_hidden: the model has no wide hidden state");
    if (i < 0 || static_cast<size_t>(i) * w >= impl_->wide_.size()) {
        throw Error("mtp_hidden: row " + std::to_string(i) + " out of range (" + std::to_string(impl_->wide_.size() / w) + " rows)");
    }
    return impl_->wide_.data() + static_cast<size_t>(i) * w;
}

const float * Context::embeddings_seq(int32_t seq) const {
    if (!impl_->params_.embeddings) throw Error("embeddings: the context was created without embeddings");
    if (impl_->params_.pooling == Pooling::None) throw Error("embeddings: no pooling (rows by output token: embeddings)");
    const auto it = impl_->embd_seq_.find(seq);
    if (it == impl_->embd_seq_.end()) throw Error("embeddings: sequence " + std::to_string(seq) + " had no token in the last call");
    return it->second.data();
}

std::vector<float> Context::embed(const std::vector<int32_t> & tokens, int32_t seq) {
    if (!impl_->params_.embeddings) throw Error("embed: the context was created without embeddings");
    if (tokens.empty()) throw Error("embed: no tokens");
    if (seq_pos_max(seq) >= 0) throw Error("embed: sequence " + std::to_string(seq) + " is not empty");
    const Pooling saved = impl_->params_.pooling;
    if (saved == Pooling::None) impl_->params_.pooling = Pooling::Mean;
    std::vector<BatchToken> b;
    for (size_t i = 0; i < tokens.size(); ++i) b.push_back({tokens[i], static_cast<int32_t>(i), {seq}, false});
    const DecodeResult r = decode(b);
    impl_->params_.pooling = saved;
    if (!r.ok()) throw Error("embed: " + r.message);
    const size_t w = impl_->model_->n_embd();
    const auto it = impl_->embd_seq_.find(seq);
    std::vector<float> out(it->second.begin(), it->second.begin() + static_cast<long>(w));
    seq_rm(seq, -1, -1);
    impl_->embd_seq_.clear();
    return out;
}

bool Context::seq_rm(int32_t seq, int32_t p0, int32_t p1) { return impl_->mem_->seq_rm(seq, p0, p1); }
void Context::seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1) { impl_->mem_->seq_cp(src, dst, p0, p1); }
void Context::seq_keep(int32_t seq) { impl_->mem_->seq_keep(seq); }
void Context::seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta) { impl_->mem_->seq_add(seq, p0, p1, delta); }
void Context::seq_div(int32_t seq, int32_t p0, int32_t p1, int32_t d) { impl_->mem_->seq_div(seq, p0, p1, d); }
int32_t Context::seq_pos_min(int32_t seq) const { return impl_->mem_->seq_first_pos(seq); }
int32_t Context::seq_pos_max(int32_t seq) const { return impl_->mem_->seq_pos_max(seq); }
void Context::clear() { impl_->mem_->clear(); }

uint32_t Context::seq_capacity() const { return impl_->mem_->kv().kv_size(); }

uint32_t Context::n_free_cells(int32_t seq) const {
    const auto & kv = impl_->mem_->kv();
    if (seq < 0 || seq >= static_cast<int32_t>(impl_->params_.n_seq_max)) {
        throw Error("n_free_cells: sequence " + std::to_string(seq) + " out of range");
    }
    const auto & st = kv.stream(kv.stream_of(seq));
    return st.size() - st.used();
}

MemoryBreakdown Context::memory_breakdown() const {
    MemoryBreakdown mb;
    for (const auto & e : impl_->mem_->breakdown()) {
        if (e.cache == "attention") mb.attention_bytes += e.bytes;
        else if (e.cache == "recurrent") mb.recurrent_bytes += e.bytes;
        else if (e.cache == "indexer") mb.indexer_bytes += e.bytes;
    }
    return mb;
}

std::vector<uint8_t> Context::state_get(int32_t seq) const { return memory::state_save(*impl_->mem_, seq); }

void Context::state_set(const std::vector<uint8_t> & data, int32_t seq) {
    memory::state_load(*impl_->mem_, data, seq, 0, "state");
}

std::vector<uint8_t> Context::state_get_tail(int32_t seq, int32_t from) const {
    if (seq < 0 || from < 0) throw Error("state_get_tail: needs a sequence id and a position >= 0");
    return memory::state_save(*impl_->mem_, seq, memory::kAppend, from);
}

void Context::state_append(const std::vector<uint8_t> & data, int32_t seq) {
    if (seq < 0) throw Error("state_append: needs a sequence id");
    memory::state_load(*impl_->mem_, data, seq, memory::kAppend, "state");
}

// State file (version 2): magic "OGSTATE1", u32 version, u64 model fingerprint, i32 seq (-1: whole context),
// u32 n_tokens, i32 tokens[n_tokens], u64 n_bytes, u32 CRC-32C of every byte before it, then the memory state
// [n_bytes] (which carries its own checksums, memory/state_io.h).
void Context::state_save_file(const std::string & path, const std::vector<int32_t> & tokens, int32_t seq) const {
    check_output_path(path, "state file");
    const std::vector<uint8_t> body = state_get(seq);
    std::vector<uint8_t> out;
    auto put = [&](const void * p, size_t n) {
        const auto * b = static_cast<const uint8_t *>(p);
        if (n > 0) out.insert(out.end(), b, b + n);
    };
    put(runtime::kFileMagic, 8);
    const uint32_t version = runtime::kFileVersion;
    put(&version, 4);
    const uint64_t fp = impl_->model_->fingerprint();
    put(&fp, 8);
    put(&seq, 4);
    const uint32_t n_tokens = static_cast<uint32_t>(tokens.size());
    put(&n_tokens, 4);
    put(tokens.data(), tokens.size() * 4);
    const uint64_t n_bytes = body.size();
    put(&n_bytes, 8);
    const uint32_t crc = crc32c(out.data(), out.size());
    put(&crc, 4);
    put(body.data(), body.size());
    write_file_atomic(path, out, "state file");  // a failed write never leaves half a state file behind
}

std::vector<int32_t> Context::state_load_file(const std::string & path, int32_t seq) {
    const std::vector<uint8_t> buf = read_file_bytes(path, "state file");
    size_t off = 0;
    auto get = [&](void * p, size_t n, const char * field) {
        if (buf.size() - off < n) throw FileError(path, off, field, "the file ends early");
        if (n > 0) std::memcpy(p, buf.data() + off, n);  // an empty token list has no storage
        off += n;
    };
    char magic[8];
    get(magic, 8, "magic");
    if (std::memcmp(magic, runtime::kFileMagic, 8) != 0) throw FileError(path, 0, "magic", "not an offgrid state file");
    uint32_t version = 0;
    get(&version, 4, "version");
    if (version != runtime::kFileVersion) {
        throw FileError(path, 8, "version", "unsupported version " + std::to_string(version) + " (this build reads " +
                                                std::to_string(runtime::kFileVersion) +
                                                (version < runtime::kFileVersion ? "; older files have no checksums: "
                                                                                   "save the state again)" : ")"));
    }
    uint64_t fp = 0;
    get(&fp, 8, "model fingerprint");
    int32_t saved_seq = 0;
    get(&saved_seq, 4, "sequence");
    uint32_t n_tokens = 0;
    get(&n_tokens, 4, "token count");
    if (static_cast<uint64_t>(n_tokens) * 4 + 12 > buf.size() - off) {
        throw FileError(path, off - 4, "token count", "larger than the file");
    }
    std::vector<int32_t> tokens(n_tokens);
    get(tokens.data(), static_cast<size_t>(n_tokens) * 4, "tokens");
    uint64_t n_bytes = 0;
    get(&n_bytes, 8, "state size");
    const size_t header_end = off;
    uint32_t crc = 0;
    get(&crc, 4, "header checksum");
    if (crc32c(buf.data(), header_end) != crc) {
        throw FileError(path, header_end, "header checksum",
                        "mismatch: the header or token list (bytes 0.." + std::to_string(header_end) + ") is damaged");
    }
    if (fp != impl_->model_->fingerprint()) {
        throw FileError(path, 12, "model fingerprint", "the state was saved with another model");
    }
    if ((saved_seq < 0) != (seq < 0)) {
        throw FileError(path, 20, "sequence",
                        saved_seq < 0 ? "a whole-context state cannot be loaded into one sequence"
                                      : "a one-sequence state cannot be loaded as the whole context");
    }
    if (n_bytes != buf.size() - off) throw FileError(path, header_end - 8, "state size", "does not match the file size");
    try {
        memory::state_load(*impl_->mem_, std::span<const uint8_t>(buf.data() + off, n_bytes), seq, 0, path);
    } catch (const FileError & e) {
        // The memory counts from the start of its own section; the file has the header before it.
        throw FileError(path, off + e.offset(), e.field(), e.detail());
    }
    return tokens;
}

}  // namespace offgrid
