// An MTP-only GGUF (`-md FILE`, qwen4exp-mtp.md 2.4): the NextN block of a qwen4exp model in a file of its own,
// without the trunk. It borrows the target's embedding and output tables unless it has nextn.embed_tokens /
// nextn.shared_head_head of its own.
#pragma once

#include <memory>
#include <string>

#include "gguf/reader.h"
#include "model/qwen4exp/hparams.h"
#include "model/qwen4exp/model.h"
#include "model/qwen4exp/weights.h"

namespace offgrid::model::qwen4exp {

class MtpDraftFile {
public:
    // Throws offgrid::Error naming the file when it has no MTP block, when a trunk tensor is present but the
    // trunk is incomplete, or when its width, stream count or vocabulary differ from the target's.
    MtpDraftFile(const std::string & path, const Model & target);

    const Hparams & hparams() const { return hp_; }
    const MtpWeights & weights() const { return w_; }

private:
    std::unique_ptr<gguf::Reader> reader_;
    Hparams hp_;
    MtpWeights w_;
};

}  // namespace offgrid::model::qwen4exp
