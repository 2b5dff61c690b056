#include "model/qwen4exp/mtp_draft_file.h"

#include <string>

#include "common/error.h"

namespace offgrid::model::qwen4exp {

MtpDraftFile::MtpDraftFile(const std::string & path, const Model & target)
    : reader_(std::make_unique<gguf::Reader>(gguf::Reader::open(path))) {
    const Hparams & th = target.hparams();
    hp_ = load_hparams(*reader_, th.n_vocab);
    if (hp_.n_embd != th.n_embd || hp_.hc != th.hc) {
        throw Error(path + ": the draft head is " + std::to_string(hp_.n_embd) + " wide with " + std::to_string(hp_.hc) +
                    " streams, the target " + std::to_string(th.n_embd) + " with " + std::to_string(th.hc));
    }
    if (hp_.n_vocab != th.n_vocab) {
        throw Error(path + ": vocabulary of " + std::to_string(hp_.n_vocab) + " tokens, the target has " +
                    std::to_string(th.n_vocab));
    }
    if (!has_mtp_block(*reader_, hp_)) throw Error(path + ": no MTP (NextN) block (blk.N.nextn.eh_proj.weight)");
    // Either a whole model or no trunk at all: some but not all trunk tensors is a broken file.
    size_t trunk = 0;
    for (uint32_t il = 0; il < hp_.n_layer; ++il) {
        if (reader_->find_tensor("blk." + std::to_string(il) + ".hc_attn_norm.weight")) ++trunk;
    }
    if (trunk != 0 && trunk != hp_.n_layer) {
        throw Error(path + ": " + std::to_string(trunk) + " of " + std::to_string(hp_.n_layer) +
                    " trunk layers present: a broken trunk");
    }
    w_ = load_mtp_weights(*reader_, hp_);
}

}  // namespace offgrid::model::qwen4exp
