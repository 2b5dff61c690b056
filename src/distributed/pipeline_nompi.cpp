// start_pipeline in a build without MPI: always the whole model in this process.
#include "common/error.h"
#include "distributed/pipeline.h"

namespace offgrid::distributed {

Pipeline start_pipeline(const std::string & model_path, const PipelineOptions & options) {
    if (!options.split.empty()) {
        throw Error("--split " + options.split + ": this build runs one process only (built without OFFGRID_MPI)");
    }
    Pipeline p;
    p.model = Model::load(model_path);
    return p;
}

void end_pipeline() {}

}  // namespace offgrid::distributed
