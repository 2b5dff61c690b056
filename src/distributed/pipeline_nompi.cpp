// start_pipeline in a build without MPI: always the whole model in this process.
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "offgrid/distributed.h"

namespace offgrid::distributed {

bool under_launcher() {
    for (const char * v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
        if (std::getenv(v) != nullptr) return true;
    }
    return false;
}

Pipeline start_pipeline(const std::string & model_path, const PipelineOptions & options) {
    const char * size = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (size != nullptr && std::string(size) != "1") {
        throw Error("started as one of " + std::string(size) + " MPI ranks, but this build runs one process only "
                    "(built without OFFGRID_MPI)");
    }
    if (!options.split.empty()) {
        throw Error("--split " + options.split + ": this build runs one process only (built without OFFGRID_MPI)");
    }
    Pipeline p;
    p.model = Model::load(model_path);
    return p;
}

void end_pipeline() {}

}  // namespace offgrid::distributed
