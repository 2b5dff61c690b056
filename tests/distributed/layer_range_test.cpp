// The forward's layer-range hook, in one process: running the ranges of a partition in order, each on its own
// memory, with the carry handed from one to the next, gives the one-forward logits bit for bit (both
// architectures, a prompt in several ubatches then decode steps of two sequences), and a range never writes the
// cache rows of another range's layers.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "gguf/reader.h"
#include "memory/hybrid_memory.h"
#include "model/architecture.h"
#include "model/forward_once.h"
#include "model/glm5next/gen_model.h"
#include "model/qwen4exp/gen_model.h"
#include "model/registry.h"

namespace offgrid::distributed {
namespace {

struct Loaded {
    std::vector<uint8_t> bytes;
    std::unique_ptr<const model::Architecture> model;
};

Loaded load(const gguf::Writer & w) {
    Loaded l;
    l.bytes = w.to_bytes();
    l.model = model::load_model(gguf::Reader::from_memory(l.bytes.data(), l.bytes.size(), "tiny"));
    return l;
}

memory::MemoryParams params(const model::Architecture & m) {
    memory::MemoryParams p;
    p.shape = m.cache_shape(tensor::ElemType::F32, tensor::ElemType::F32);
    p.n_ctx = 512;
    p.n_seq_max = 2;
    p.unified = false;
    p.n_ubatch = 7;  // the prompt takes several ubatches
    const model::MemoryTraits t = m.memory_traits();
    p.kpool = t.kpool;
    p.by_order = t.kpool_by_order;
    p.window = t.window;
    p.n_vocab = m.n_vocab();
    return p;
}

bool all_zero(const uint8_t * p, size_t n) {
    for (size_t i = 0; i < n; ++i)
        if (p[i] != 0) return false;
    return true;
}

// Decodes `batches` once through all layers and once through the ranges cut at `cuts`; every logit row must be
// equal byte for byte.
// `parts`: the model each range runs on (empty: m for all); with parts, each range's memory holds the rows of its
// own layers only (MemoryParams::held), as a pipeline rank's does.
void expect_ranges_equal_whole(const model::Architecture & m, const std::vector<uint32_t> & cuts,
                               const std::vector<memory::Batch> & batches,
                               const std::vector<const model::Architecture *> & parts = {}) {
    const memory::MemoryParams mp = params(m);
    memory::HybridMemory whole(mp);
    std::vector<uint32_t> bounds{0};
    bounds.insert(bounds.end(), cuts.begin(), cuts.end());
    bounds.push_back(m.n_layers());
    std::vector<std::unique_ptr<memory::HybridMemory>> stages;
    for (size_t s = 0; s + 1 < bounds.size(); ++s) {
        memory::MemoryParams sp = mp;
        if (!parts.empty()) {
            sp.held.assign(m.n_layers(), false);
            for (uint32_t il = bounds[s]; il < bounds[s + 1]; ++il) sp.held[il] = true;
            for (uint32_t il = 0; il < m.n_layers(); ++il)
                if (m.layer_caches(il).row_state) sp.row_state_held = sp.held[il];
        }
        stages.push_back(std::make_unique<memory::HybridMemory>(sp));
    }

    size_t rows = 0;
    for (const memory::Batch & b : batches) {
        ASSERT_EQ(whole.begin(b).status, memory::DecodeStatus::Ok);
        for (auto & st : stages) ASSERT_EQ(st->begin(b).status, memory::DecodeStatus::Ok);
        while (whole.has_next()) {
            const memory::Plan & plan = whole.apply();
            const model::ForwardResult want = model::forward_once(m, mp.shape, plan, whole, nullptr, {});
            model::LayerCarry carry;
            model::ForwardResult got;
            for (size_t s = 0; s < stages.size(); ++s) {
                ASSERT_TRUE(stages[s]->has_next());
                const memory::Plan & sp = stages[s]->apply();
                model::ForwardOptions o;
                o.first_layer = bounds[s];
                o.end_layer = bounds[s + 1];
                o.carry_in = s > 0 ? &carry : nullptr;
                got = model::forward_once(parts.empty() ? m : *parts[s], mp.shape, sp, *stages[s], nullptr, o);
                if (s + 1 < stages.size()) {
                    EXPECT_TRUE(got.logits.empty()) << "a range before the last computes no head";
                    ASSERT_EQ(got.carry.streams.size(), sp.tokens.size() * m.carry_width());
                    carry = std::move(got.carry);
                }
            }
            ASSERT_EQ(want.logits.size(), got.logits.size());
            EXPECT_EQ(std::memcmp(want.logits.data(), got.logits.data(), want.logits.size() * sizeof(float)), 0)
                << "ubatch logits differ";
            rows += want.logits.size() / m.n_vocab();
        }
        whole.finish();
        for (auto & st : stages) st->finish();
    }
    EXPECT_GT(rows, 0u);
    // A stage writes only its own layers' rows: the K rows of every other attention layer stay as allocated (0).
    for (size_t s = 0; s < stages.size(); ++s) {
        for (uint32_t il = 0; il < m.n_layers(); ++il) {
            const model::LayerCaches lc = m.layer_caches(il);
            if (lc.attn < 0 || (il >= bounds[s] && il < bounds[s + 1])) continue;
            auto & kv = stages[s]->kv();
            if (!parts.empty()) {
                EXPECT_FALSE(kv.held(static_cast<uint32_t>(lc.attn))) << "stage " << s << " holds layer " << il;
                continue;
            }
            EXPECT_TRUE(all_zero(kv.k_row(static_cast<uint32_t>(lc.attn), 0), size_t{kv.n_cells()} * kv.k_row_bytes(static_cast<uint32_t>(lc.attn))))
                << "stage " << s << " wrote layer " << il;
        }
    }
}

std::vector<memory::Batch> workload(uint32_t n_vocab) {
    std::vector<memory::Batch> out;
    memory::Batch prompt;
    for (int i = 0; i < 23; ++i) {
        prompt.tokens.push_back(static_cast<int32_t>((i * 37 + 5) % n_vocab));
        prompt.seqs.push_back({i < 12 ? 0 : 1});
        prompt.output.push_back(i == 11 || i == 22 ? 1 : 0);
    }
    out.push_back(prompt);
    for (int step = 0; step < 6; ++step) {
        memory::Batch b;
        for (int s = 0; s < 2; ++s) {
            b.tokens.push_back(static_cast<int32_t>((step * 11 + s * 3 + 1) % n_vocab));
            b.seqs.push_back({s});
            b.output.push_back(1);
        }
        out.push_back(b);
    }
    return out;
}

TEST(LayerRange, Qwen4expRangesEqualOneForward) {
    const Loaded l = load(model::qwen4exp::generate_model(model::qwen4exp::gen_preset("tiny")));
    const model::Architecture & m = *l.model;
    ASSERT_GE(m.n_layers(), 3u);
    expect_ranges_equal_whole(m, {1}, workload(m.n_vocab()));
    expect_ranges_equal_whole(m, {1, m.n_layers() - 1}, workload(m.n_vocab()));
}

TEST(LayerRange, Glm5NextRangesEqualOneForward) {
    const Loaded l = load(model::glm5next::generate_model(model::glm5next::gen_preset("tiny")));
    const model::Architecture & m = *l.model;
    ASSERT_GE(m.n_layers(), 3u);
    // Cuts between a full-indexer layer and the shared ones after it carry the selection.
    for (uint32_t cut = 1; cut < m.n_layers(); ++cut) expect_ranges_equal_whole(m, {cut}, workload(m.n_vocab()));
    expect_ranges_equal_whole(m, {2, 4}, workload(m.n_vocab()));
}

struct TempFile {
    std::string path;
    explicit TempFile(const std::vector<uint8_t> & bytes) {
        static int n = 0;
        path = (std::filesystem::temp_directory_path() /
                ("offgrid-parts-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ".gguf")).string();
        std::ofstream(path, std::ios::binary)
            .write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
    ~TempFile() { std::filesystem::remove(path); }
};

// What a pipeline rank does: the table read without mapping, the range's tensors mapped (model::tensors_for), the
// model loaded for that span. Every tensor is mapped by some part, none by a part that does not read it.
std::vector<std::unique_ptr<const model::Architecture>> load_parts(const std::string & path, uint32_t n_layers,
                                                                   const std::vector<uint32_t> & cuts) {
    std::vector<uint32_t> bounds{0};
    bounds.insert(bounds.end(), cuts.begin(), cuts.end());
    bounds.push_back(n_layers);
    std::vector<std::unique_ptr<const model::Architecture>> parts;
    std::vector<bool> covered;
    for (size_t s = 0; s + 1 < bounds.size(); ++s) {
        gguf::Reader r = gguf::Reader::open_table(path);
        const model::LayerSpan span{bounds[s], bounds[s + 1]};
        const std::vector<bool> wanted = model::tensors_for(r, span);
        r.map_tensors(wanted);
        covered.resize(wanted.size(), false);
        for (size_t k = 0; k < wanted.size(); ++k) {
            covered[k] = covered[k] || wanted[k];
            EXPECT_EQ(r.tensors()[k].data != nullptr, wanted[k]) << r.tensors()[k].name;
        }
        EXPECT_LT(r.mapped_bytes(), r.file_size()) << "part " << s << " maps the whole file";
        EXPECT_GE(r.n_windows(), 1u);
        parts.push_back(model::load_model(std::move(r), span));
    }
    for (size_t k = 0; k < covered.size(); ++k) EXPECT_TRUE(covered[k]) << "tensor " << k << " is mapped by no part";
    return parts;
}

void expect_parts_equal_whole(const gguf::Writer & w, const std::vector<std::vector<uint32_t>> & partitions) {
    const Loaded l = load(w);
    const model::Architecture & m = *l.model;
    const TempFile file(l.bytes);
    for (const std::vector<uint32_t> & cuts : partitions) {
        SCOPED_TRACE("cuts at " + ::testing::PrintToString(cuts));
        const auto parts = load_parts(file.path, m.n_layers(), cuts);
        std::vector<const model::Architecture *> ptrs;
        for (const auto & p : parts) ptrs.push_back(p.get());
        expect_ranges_equal_whole(m, cuts, workload(m.n_vocab()), ptrs);
    }
}

TEST(LayerRange, Qwen4expPartsLoadedAloneEqualOneForward) {
    // The PLE layer (layer 0) and its table with the first part; the MTP block (past the trunk) with the last.
    model::qwen4exp::GenConfig tiny = model::qwen4exp::gen_preset("tiny");
    const uint32_t n = tiny.n_layer;
    ASSERT_GE(n, 3u);
    expect_parts_equal_whole(model::qwen4exp::generate_model(tiny), {{1}, {1, n - 1}});
    tiny.mtp = true;
    expect_parts_equal_whole(model::qwen4exp::generate_model(tiny), {{n - 1}});
}

TEST(LayerRange, Glm5NextPartsLoadedAloneEqualOneForward) {
    const Loaded l = load(model::glm5next::generate_model(model::glm5next::gen_preset("tiny")));
    std::vector<std::vector<uint32_t>> partitions;
    for (uint32_t cut = 1; cut < l.model->n_layers(); ++cut) partitions.push_back({cut});
    expect_parts_equal_whole(model::glm5next::generate_model(model::glm5next::gen_preset("tiny")), partitions);
}

// Begins a ubatch of two tokens of sequence 0, both with logits (the memory keeps its own copy of the batch).
memory::DecodeStatus begin_two_tokens(memory::HybridMemory & mem) {
    memory::Batch b;
    b.tokens = {1, 2};
    b.seqs = {{0}, {0}};
    b.output = {0, 1};
    return mem.begin(b).status;
}

TEST(LayerRange, APartRefusesLayersItDidNotLoad) {
    const Loaded l = load(model::qwen4exp::generate_model(model::qwen4exp::gen_preset("tiny")));
    const TempFile file(l.bytes);
    const auto parts = load_parts(file.path, l.model->n_layers(), {1});
    const model::Architecture & second = *parts[1];
    const memory::MemoryParams mp = params(second);
    memory::HybridMemory mem(mp);
    ASSERT_EQ(begin_two_tokens(mem), memory::DecodeStatus::Ok);
    const memory::Plan & plan = mem.apply();
    EXPECT_THROW(model::forward_once(second, mp.shape, plan, mem, nullptr, {}), Error) << "the second part has no embedding";
    mem.undo();
}

TEST(LayerRange, RefusesARangeOutsideTheModelOrWithoutItsInput) {
    const Loaded l = load(model::qwen4exp::generate_model(model::qwen4exp::gen_preset("tiny")));
    const model::Architecture & m = *l.model;
    const memory::MemoryParams mp = params(m);
    memory::HybridMemory mem(mp);
    ASSERT_EQ(begin_two_tokens(mem), memory::DecodeStatus::Ok);
    const memory::Plan & plan = mem.apply();
    model::ForwardOptions o;
    o.first_layer = 1;  // no carry
    EXPECT_THROW(model::forward_once(m, mp.shape, plan, mem, nullptr, o), Error);
    o.first_layer = 0;
    o.end_layer = m.n_layers() + 1;
    EXPECT_THROW(model::forward_once(m, mp.shape, plan, mem, nullptr, o), Error);
    mem.undo();
}

}  // namespace
}  // namespace offgrid::distributed
