// Test helper: replays a golden workload script (golden/README.md) through the real hybrid memory and the
// model's forward, producing the logit rows in LOGREC01 order. An integration check of the plan contract;
// the runtime owns the product version of this loop.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "memory/hybrid_memory.h"
#include "model/model.h"

namespace offgrid::test {

struct ReplayRow {
    int32_t step, seq, pos, tok;
    std::vector<float> logits;
};

class Replay {
public:
    explicit Replay(const model::Model & m) : model_(m) {}
    // Runs every line of the script; throws std::runtime_error on a command it does not know.
    void run_script(const std::string & path);
    const std::vector<ReplayRow> & rows() const { return rows_; }

private:
    void command(const std::vector<std::string> & f, std::vector<std::string> & lines, size_t & line_no);
    void ensure_context();
    void decode(const memory::Batch & b);
    std::vector<int32_t> tokens(const std::vector<std::string> & items, memory::Pos & first_pos);

    const model::Model & model_;
    std::map<std::string, std::string> settings_;
    std::unique_ptr<memory::HybridMemory> mem_;
    memory::CacheShape shape_;
    std::vector<ReplayRow> rows_;
    std::map<int, int32_t> last_argmax_;
    std::map<std::string, std::vector<uint8_t>> files_;
    bool outputs_all_ = true;
    int step_ = 0;
};

}  // namespace offgrid::test
