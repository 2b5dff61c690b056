#include "model/qwen4exp/model.h"

#include "common/error.h"

namespace offgrid::model {

Model Model::load(const std::string & path) { return from_reader(gguf::Reader::open(path)); }

Model Model::from_reader(gguf::Reader reader) {
    Model m;
    m.reader_ = std::make_unique<gguf::Reader>(std::move(reader));
    m.hp_ = load_hparams(*m.reader_);
    m.w_ = load_weights(*m.reader_, m.hp_);
    int n_attn = 0, n_recr = 0;
    for (uint32_t il = 0; il < m.hp_.n_layer; ++il) {
        const bool recr = m.hp_.is_recurrent[il];
        m.attn_index_.push_back(recr ? -1 : n_attn++);
        m.recr_index_.push_back(recr ? n_recr++ : -1);
    }
    return m;
}

memory::CacheShape Model::cache_shape(tensor::ElemType type_k, tensor::ElemType type_v) const {
    for (auto t : {type_k, type_v}) {
        if (t != tensor::ElemType::F32 && t != tensor::ElemType::F16) {
            throw Error("cache type " + std::to_string(static_cast<uint32_t>(t)) + " is not supported (f32, f16)");
        }
    }
    memory::CacheShape s;
    s.n_attn_layers = hp_.n_attn_layers();
    s.kv_width = hp_.head_dim * hp_.n_head_kv;
    s.idx_width = hp_.kpool > 0 ? hp_.idx_dim : 0;
    s.n_recr_layers = hp_.n_recr_layers();
    s.conv_floats = (hp_.ssm_d_conv - 1) * hp_.ssm_conv_dim();
    s.ssm_floats = hp_.ssm_d_state * hp_.ssm_d_state * hp_.ssm_n_v_heads;
    s.ple_floats = hp_.has_ple ? (hp_.ple_conv_kernel - 1) * hp_.ple_ngram * hp_.hc * hp_.n_embd : 0;
    s.type_k = type_k;
    s.type_v = type_v;
    return s;
}

}  // namespace offgrid::model
