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
    TestStorage(const memory::CacheShape & s, uint32_t n_cells, uint32_t n_rows) : s_(s), n_cells_(n_cells) {
        const size_t ek = s.type_k == tensor::ElemType::F32 ? 4 : 2, ev = s.type_v == tensor::ElemType::F32 ? 4 : 2;
        k_bytes_ = s.k_width * ek;
        v_bytes_ = s.v_width * ev;
        idx_bytes_ = s.idx_parts * s.idx_width * ek;
        k_.assign(size_t(s.n_attn_layers) * n_cells * k_bytes_, 0);
        v_.assign(size_t(s.n_attn_layers) * n_cells * v_bytes_, 0);
        idx_.assign(size_t(s.n_attn_layers) * n_cells * idx_bytes_, 0);
        conv_.assign(size_t(s.n_recr_layers) * n_rows * s.conv_floats, 0.0f);
        ssm_.assign(size_t(s.n_recr_layers) * n_rows * s.ssm_floats, 0.0f);
        ple_.assign(size_t(n_rows) * s.row_floats, 0.0f);
        n_rows_ = n_rows;
    }
    void * k_row(uint32_t l, uint32_t c) override { return &k_[(size_t(l) * n_cells_ + c) * k_bytes_]; }
    void * v_row(uint32_t l, uint32_t c) override { return &v_[(size_t(l) * n_cells_ + c) * v_bytes_]; }
    void * idx_row(uint32_t l, uint32_t c) override { return &idx_[(size_t(l) * n_cells_ + c) * idx_bytes_]; }
    memory::RowTable k_rows(uint32_t l) override { return {static_cast<uint8_t *>(k_row(l, 0)), k_bytes_}; }
    memory::RowTable v_rows(uint32_t l) override { return {static_cast<uint8_t *>(v_row(l, 0)), v_bytes_}; }
    memory::RowTable idx_rows(uint32_t l) override {
        return idx_bytes_ ? memory::RowTable{static_cast<uint8_t *>(idx_row(l, 0)), idx_bytes_} : memory::RowTable{};
    }
    float * conv_state(uint32_t l, uint32_t r) override { return &conv_[(size_t(l) * n_rows_ + r) * s_.conv_floats]; }
    float * ssm_state(uint32_t l, uint32_t r) override { return &ssm_[(size_t(l) * n_rows_ + r) * s_.ssm_floats]; }
    float * row_state(uint32_t r) override { return ple_.data() + size_t(r) * s_.row_floats; }

private:
    memory::CacheShape s_;
    uint32_t n_cells_, n_rows_ = 1;
    size_t k_bytes_, v_bytes_, idx_bytes_;
    std::vector<uint8_t> k_, v_, idx_;
    std::vector<float> conv_, ssm_, ple_;
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
