// qwen4exp's draft head for `draft-mtp` (model/draft_head.h): the MTP block of the model itself, or of an
// MTP-only file (mtp_draft_file.h), over MtpHead.
#pragma once

#include <memory>
#include <string>

#include "model/draft_head.h"

namespace offgrid::model::qwen4exp {

// `target` is a qwen4exp Model (the registry calls this for that architecture only).
std::unique_ptr<DraftHead> make_draft_head(const Architecture & target, const std::string & draft_file);

}  // namespace offgrid::model::qwen4exp
