// TEST FIXTURE, not the memory: a single-sequence Plan + Storage for model tests. Cell i holds position i,
// there is one stream and one recurrent row (row 0, plus optional snapshot rows), pools are kpool consecutive
// cells from the sequence start, and the new pools of a ubatch are those its tokens complete.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "memory/plan.h"
#include "model/qwen4exp/forward.h"
#include "model/qwen4exp/model.h"

namespace offgrid::test {

class TestStorage : public memory::Storage {
public:
    // Rows of every layer as the shape declares them: n_cells rows per attention layer, n_rows per recurrent one.
    TestStorage(const memory::CacheShape & s, uint32_t n_cells, uint32_t n_rows) : s_(s), n_rows_(n_rows) {
        const size_t ek = s.type_k == tensor::ElemType::F32 ? 4 : 2, ev = s.type_v == tensor::ElemType::F32 ? 4 : 2;
        for (uint32_t l = 0; l < s.n_attn_layers(); ++l) {
            const memory::LayerCache & c = s.attn(l);
            k_.push_back({std::vector<uint8_t>(size_t(n_cells) * c.k_width * ek), c.k_width * ek});
            v_.push_back({std::vector<uint8_t>(size_t(n_cells) * c.v_width * ev), c.v_width * ev});
            idx_.push_back({std::vector<uint8_t>(size_t(n_cells) * c.idx_parts * c.idx_width * ek), c.idx_parts * c.idx_width * ek});
        }
        for (uint32_t l = 0; l < s.n_recr_layers(); ++l) {
            conv_.push_back({std::vector<float>(size_t(n_rows) * s.recr(l).conv_floats), s.recr(l).conv_floats});
            ssm_.push_back({std::vector<float>(size_t(n_rows) * s.recr(l).state_floats), s.recr(l).state_floats});
        }
        ple_.assign(size_t(n_rows) * s.row_floats, 0.0f);
    }
    void * k_row(uint32_t l, uint32_t c) override { return k_[l].row(c); }
    void * v_row(uint32_t l, uint32_t c) override { return v_[l].row(c); }
    void * idx_row(uint32_t l, uint32_t c) override { return idx_[l].row(c); }
    memory::RowTable k_rows(uint32_t l) override { return k_[l].table(); }
    memory::RowTable v_rows(uint32_t l) override { return v_[l].table(); }
    memory::RowTable idx_rows(uint32_t l) override { return idx_[l].table(); }
    float * conv_state(uint32_t l, uint32_t r) override { return conv_[l].row(r); }
    float * ssm_state(uint32_t l, uint32_t r) override { return ssm_[l].row(r); }
    float * row_state(uint32_t r) override { return ple_.data() + size_t(r) * s_.row_floats; }

private:
    template <class T>
    struct Rows {
        std::vector<T> data;
        size_t width;  // elements of one row (0: the layer has none)
        T * row(uint32_t i) { return width ? data.data() + size_t(i) * width : nullptr; }
        memory::RowTable table() {
            return width ? memory::RowTable{reinterpret_cast<uint8_t *>(data.data()), width * sizeof(T)} : memory::RowTable{};
        }
    };
    memory::CacheShape s_;
    uint32_t n_rows_ = 1;
    std::vector<Rows<uint8_t>> k_, v_, idx_;
    std::vector<Rows<float>> conv_, ssm_;
    std::vector<float> ple_;
};

class TestPlan : public memory::Plan {
public:
    memory::SeqView view;
    std::vector<memory::Token> cell_tokens;
    std::vector<std::vector<uint32_t>> tails;
    std::vector<std::vector<uint32_t>> members;

    memory::SeqView seq_view(memory::SeqId) const override { return view; }
    memory::Token cell_token(uint32_t cell) const override { return cell_tokens.at(cell); }
};

// One sequence (id 0) growing from position 0.
class TestMemory {
public:
    TestMemory(const model::qwen4exp::Model & m, uint32_t n_cells, uint32_t kpool,
               tensor::ElemType type_k = tensor::ElemType::F32, tensor::ElemType type_v = tensor::ElemType::F32,
               uint32_t n_rows = 1)
        : model_(m), shape_(m.cache_shape(type_k, type_v)), storage_(shape_, n_cells, n_rows), n_cells_(n_cells),
          kpool_(kpool) {}

    // Rollback snapshot rows given to the group of the next decode (rows 1.. of the storage).
    std::vector<uint32_t> snapshot_rows;

    uint32_t size() const { return static_cast<uint32_t>(cells_.size()); }

    // Appends the tokens as one ubatch and runs the forward; returns the logits of the rows with output set.
    std::vector<float> decode(const std::vector<memory::Token> & tokens, const std::vector<bool> & outputs,
                              ops::ThreadPool * pool = nullptr) {
        TestPlan plan;
        plan.kpool = kpool_;
        const uint32_t first = size();
        for (size_t i = 0; i < tokens.size(); ++i) {
            const uint32_t p = first + static_cast<uint32_t>(i);
            if (p >= n_cells_) throw std::runtime_error("test memory full");
            cells_.push_back({static_cast<memory::Pos>(p), p});
            tokens_.push_back(tokens[i]);
            if (kpool_ > 0 && (p + 1) % kpool_ == 0) {
                pools_.push_back(p + 1 - kpool_);
                reps_.push_back(p);
            }
        }
        plan.cell_tokens = tokens_;
        plan.view = {cells_, pools_, reps_};
        plan.tails.resize(tokens.size());
        memory::SeqGroup g{0, {}, 0, snapshot_rows};
        for (size_t i = 0; i < tokens.size(); ++i) {
            const uint32_t p = first + static_cast<uint32_t>(i);
            memory::TokenPlan tp;
            tp.token = tokens[i];
            tp.pos = static_cast<memory::Pos>(p);
            tp.seq = 0;
            tp.cell = p;
            tp.output = outputs[i];
            tp.n_visible = p + 1;
            tp.n_pools = kpool_ > 0 ? (p + 1) / kpool_ : 0;
            if (kpool_ > 0) {
                for (uint32_t c = p + 1; c-- > tp.n_pools * kpool_;) plan.tails[i].push_back(c);
            }
            tp.tail = plan.tails[i];
            plan.tokens.push_back(tp);
            g.tokens.push_back(static_cast<uint32_t>(i));
        }
        plan.groups.push_back(g);
        // New pools: those completed by this ubatch.
        if (kpool_ > 0) {
            for (uint32_t k = first / kpool_; (k + 1) * kpool_ <= size(); ++k) {
                if ((k + 1) * kpool_ - 1 < first) continue;
                std::vector<uint32_t> mem;
                for (uint32_t m = 0; m < kpool_; ++m) mem.push_back(k * kpool_ + m);
                plan.members.push_back(mem);
            }
            for (const auto & mem : plan.members) {
                const memory::Pos p0 = static_cast<memory::Pos>(mem[0]);
                plan.new_pools.push_back({mem, mem.back(), p0});
            }
        }
        return model::qwen4exp::forward(model_, shape_, plan, storage_, pool);
    }

    TestStorage & storage() { return storage_; }
    const memory::CacheShape & shape() const { return shape_; }

private:
    const model::qwen4exp::Model & model_;
    memory::CacheShape shape_;
    TestStorage storage_;
    uint32_t n_cells_, kpool_;
    std::vector<memory::PosCell> cells_;
    std::vector<uint32_t> pools_, reps_;
    std::vector<memory::Token> tokens_;
};

}  // namespace offgrid::test
