// The input-file readers of offgrid/prompt_file.h, over the library's own tokenizer (tests call these).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "offgrid/prompt_file.h"
#include "runtime/tokenizer.h"

namespace offgrid::runtime {

using offgrid::BoundedTokens;
using offgrid::check_input_file;
using offgrid::printable;
using offgrid::read_token_ids;

// The public functions of offgrid/prompt_file.h over the internal tokenizer (the public ones forward here).
BoundedTokens tokenize_file(const Tokenizer & tok, const std::string & path, size_t limit, const std::string & what,
                            size_t block = 1u << 20);
BoundedTokens tokenize_text(const Tokenizer & tok, std::string_view text, size_t limit, size_t block = 1u << 20);

}  // namespace offgrid::runtime
