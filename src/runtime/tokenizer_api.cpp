// The public Tokenizer (offgrid/tokenizer.h): a shared handle on the immutable internal tokenizer.
#include "offgrid/tokenizer.h"

#include "gguf/reader.h"
#include "offgrid/context.h"
#include "runtime/byte_vocab.h"
#include "runtime/tokenizer.h"
#include "runtime/unicode.h"

namespace offgrid {

Tokenizer::Tokenizer(std::shared_ptr<const runtime::Tokenizer> impl) : impl_(std::move(impl)) {
    if (!impl_) throw Error("Tokenizer: no implementation");
}

Tokenizer Tokenizer::from_model(const Model & model) {
    return Tokenizer(std::make_shared<const runtime::Tokenizer>(runtime::Tokenizer::from_model(model)));
}

Tokenizer Tokenizer::byte_level() {
    static const auto shared = std::make_shared<const runtime::Tokenizer>(runtime::byte_vocab_tokenizer());
    return Tokenizer(shared);
}

Tokenizer Tokenizer::from_file(const std::string & gguf_path) {
    // Map mode reads only the pages the metadata lives on.
    const gguf::Reader reader = gguf::Reader::open(gguf_path);
    return Tokenizer(std::make_shared<const runtime::Tokenizer>(runtime::Tokenizer::from_gguf(reader)));
}

std::vector<int32_t> Tokenizer::tokenize(std::string_view text, bool parse_special) const {
    return impl_->tokenize(text, parse_special);
}

void Tokenizer::tokenize(std::string_view text, bool parse_special, std::vector<int32_t> & out) const {
    impl_->tokenize(text, parse_special, out);
}

std::vector<int32_t> Tokenizer::prompt(std::string_view text, bool parse_special) const {
    std::vector<int32_t> out;
    if (impl_->add_bos() && impl_->bos()) out.push_back(*impl_->bos());
    impl_->tokenize(text, parse_special, out);
    return out;
}

std::string Tokenizer::detokenize(std::span<const int32_t> ids, bool render_special) const {
    return impl_->detokenize(ids, render_special);
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
    return impl_->token_to_piece(id, render_special);
}

int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->n_vocab()); }
const std::string & Tokenizer::token_text(int32_t id) const { return impl_->token_text(id); }
TokenType Tokenizer::token_type(int32_t id) const { return impl_->token_type(id); }
std::optional<int32_t> Tokenizer::find_token(std::string_view stored_text) const { return impl_->find_token(stored_text); }
std::optional<int32_t> Tokenizer::bos() const { return impl_->bos(); }
std::optional<int32_t> Tokenizer::eos() const { return impl_->eos(); }
std::optional<int32_t> Tokenizer::pad() const { return impl_->pad(); }
bool Tokenizer::add_bos() const { return impl_->add_bos(); }
bool Tokenizer::is_end_of_generation(int32_t id) const { return impl_->is_end_of_generation(id); }
const std::vector<int32_t> & Tokenizer::end_of_generation_tokens() const { return impl_->end_of_generation_tokens(); }

size_t utf8_complete_prefix(std::string_view bytes) { return runtime::unicode::complete_utf8_prefix(bytes); }

}  // namespace offgrid
