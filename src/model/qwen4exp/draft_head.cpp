#include "model/qwen4exp/draft_head.h"

#include "common/error.h"
#include "model/qwen4exp/model.h"
#include "model/qwen4exp/mtp_draft_file.h"
#include "model/qwen4exp/mtp_head.h"
#include "ops/workspace.h"

namespace offgrid::model::qwen4exp {

namespace {

class RowCache final : public DraftHead::Cache {
public:
    bool empty() const override { return rows.n == 0; }
    int32_t end() const override { return rows.end(); }
    void truncate(int32_t pos) override { rows.truncate(pos); }
    MtpCache rows;
    ops::Workspace ws;  // the head's scratch for this sequence, kept from step to step
};

class Head final : public DraftHead {
public:
    // The sidecar (when there is one) owns the block's weights: it lives as long as the head.
    Head(const Model & target, std::unique_ptr<MtpDraftFile> sidecar)
        : sidecar_(std::move(sidecar)),
          head_(sidecar_ ? sidecar_->hparams() : target.hparams(), sidecar_ ? sidecar_->weights() : target.weights().mtp,
                target.weights().token_embd, target.weights().output) {}

    uint32_t wide_width() const override { return head_.wide_width(); }
    uint32_t n_vocab() const override { return head_.n_vocab(); }
    std::unique_ptr<DraftHead::Cache> new_cache() const override { return std::make_unique<RowCache>(); }
    void catch_up(DraftHead::Cache & cache, const int32_t * tokens, const int32_t * pos, const float * h,
                  size_t n) const override {
        auto & c = static_cast<RowCache &>(cache);
        head_.catch_up(c.rows, tokens, pos, h, n, nullptr, &c.ws);
    }
    void step(DraftHead::Cache & cache, int32_t token, int32_t pos, const float * h, float * logits,
              float * h_out) const override {
        auto & c = static_cast<RowCache &>(cache);
        head_.step(c.rows, token, pos, h, logits, h_out, nullptr, &c.ws);
    }

private:
    std::unique_ptr<MtpDraftFile> sidecar_;
    MtpHead head_;
};

}  // namespace

std::unique_ptr<DraftHead> make_draft_head(const Architecture & target, const std::string & draft_file) {
    const auto * loaded = dynamic_cast<const Model *>(&target);
    if (loaded == nullptr) {
        throw Error("draft-mtp: the draft head needs the whole " + target.name() + " model in this process (not a "
                    "pipeline stage's wrapper of it)");
    }
    const Model & model = *loaded;
    if (draft_file.empty()) {
        if (!model.weights().mtp.present) {
            throw Error(model.reader().path() + ": no MTP (NextN) block to draft with; give an MTP-only file with -md");
        }
        return std::make_unique<Head>(model, nullptr);
    }
    return std::make_unique<Head>(model, std::make_unique<MtpDraftFile>(draft_file, model));
}

}  // namespace offgrid::model::qwen4exp
