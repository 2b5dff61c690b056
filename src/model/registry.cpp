#include "model/registry.h"

#include "common/error.h"
#include "model/draft_head.h"
#include "model/glm5next/model.h"
#include "model/qwen4exp/draft_head.h"
#include "model/qwen4exp/model.h"

namespace offgrid::model {

namespace {

using Loader = std::unique_ptr<const Architecture> (*)(gguf::Reader reader, const LayerSpan & span);
using TensorsFor = std::vector<bool> (*)(const gguf::Reader & reader, const LayerSpan & span);
using DraftHeadMaker = std::unique_ptr<DraftHead> (*)(const Architecture & target, const std::string & draft_file);

struct Entry {
    const char * name;
    Loader load;
    TensorsFor tensors;
    DraftHeadMaker draft_head;  // nullptr: no draft head (draft-mtp is refused)
};

// One line per architecture. The loader validates everything its architecture reads.
const Entry kArchitectures[] = {
    {"qwen4exp",
     [](gguf::Reader r, const LayerSpan & span) -> std::unique_ptr<const Architecture> {
         qwen4exp::LoadOptions options;
         options.span = span;
         return std::make_unique<const qwen4exp::Model>(qwen4exp::Model::from_reader(std::move(r), options));
     },
     [](const gguf::Reader & r, const LayerSpan & span) { return qwen4exp::tensors_for(r, qwen4exp::load_hparams(r), span); },
     qwen4exp::make_draft_head},
    {"glm5-next",
     [](gguf::Reader r, const LayerSpan & span) -> std::unique_ptr<const Architecture> {
         return std::make_unique<const glm5next::Model>(glm5next::Model::from_reader(std::move(r), span));
     },
     [](const gguf::Reader & r, const LayerSpan & span) { return glm5next::tensors_for(r, glm5next::load_hparams(r), span); },
     nullptr},
};

}  // namespace

std::vector<std::string> architecture_names() {
    std::vector<std::string> names;
    for (const Entry & e : kArchitectures) names.emplace_back(e.name);
    return names;
}

namespace {

const Entry & entry_for(const gguf::Reader & reader) {
    const gguf::Value * v = reader.find("general.architecture");
    if (!v) throw Error(reader.path() + ": key general.architecture: missing");
    const std::string arch = reader.get_string("general.architecture");  // throws naming the key if not a string
    for (const Entry & e : kArchitectures) {
        if (arch == e.name) return e;
    }
    std::string known;
    for (const Entry & e : kArchitectures) known += (known.empty() ? "" : ", ") + std::string(e.name);
    throw Error(reader.path() + ": key general.architecture: \"" + arch + "\" is not supported (known: " + known + ")");
}

}  // namespace

std::unique_ptr<const Architecture> load_model(gguf::Reader reader) { return load_model(std::move(reader), LayerSpan{}); }

std::unique_ptr<const Architecture> load_model(gguf::Reader reader, const LayerSpan & span) {
    const Entry & e = entry_for(reader);
    return e.load(std::move(reader), span);
}

std::vector<bool> tensors_for(const gguf::Reader & reader, const LayerSpan & span) {
    return entry_for(reader).tensors(reader, span);
}

std::unique_ptr<const Architecture> load_model(const std::string & path) { return load_model(gguf::Reader::open(path)); }

std::unique_ptr<DraftHead> make_draft_head(const Architecture & target, const std::string & draft_file) {
    std::string with;
    for (const Entry & e : kArchitectures) {
        if (target.name() == e.name && e.draft_head) return e.draft_head(target, draft_file);
        if (e.draft_head) with += (with.empty() ? "" : ", ") + std::string(e.name);
    }
    throw Error("draft-mtp: " + target.name() + " models have no MTP draft head (" + with + " have)");
}

}  // namespace offgrid::model
