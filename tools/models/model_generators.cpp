#include "models/model_generator.h"

// The registry: one line per architecture, naming the folder whose generator.cpp defines
// offgrid::model::<folder>::generator(). The first line is the default architecture.
#define OFFGRID_MODEL_GENERATORS(X) \
    X(qwen4exp)                     \
    X(glm5next)

#define OFFGRID_DECLARE_GENERATOR(folder) \
    namespace offgrid::model::folder {    \
    const tools::ModelGenerator & generator(); \
    }
OFFGRID_MODEL_GENERATORS(OFFGRID_DECLARE_GENERATOR)

namespace offgrid::tools {

const std::vector<const ModelGenerator *> & model_generators() {
#define OFFGRID_LIST_GENERATOR(folder) &model::folder::generator(),
    static const std::vector<const ModelGenerator *> all{OFFGRID_MODEL_GENERATORS(OFFGRID_LIST_GENERATOR)};
    return all;
}

const ModelGenerator * find_model_generator(std::string_view arch) {
    for (const ModelGenerator * g : model_generators()) {
        if (g->arch() == arch) return g;
    }
    return nullptr;
}

std::string model_generator_names(const char * separator) {
    std::string out;
    for (const ModelGenerator * g : model_generators()) out += (out.empty() ? "" : separator) + g->arch();
    return out;
}

}  // namespace offgrid::tools
