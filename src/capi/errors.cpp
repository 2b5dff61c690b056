// The per-thread last error, status names, the version, and the process-wide kernel choices.
#include <string>

#include "capi/handles.h"
#include "offgrid/system.h"
#include "offgrid/version.h"

namespace offgrid::capi {

namespace {
thread_local std::string last_error;
}

void set_error(offgrid_status status, const char * message) noexcept {
    try {
        last_error = message ? message : offgrid_status_name(status);
    } catch (...) {
        last_error.clear();  // no memory for the message: the status still says what happened
    }
}

void clear_error() noexcept { last_error.clear(); }

}  // namespace offgrid::capi

extern "C" {

const char * offgrid_last_error(void) { return offgrid::capi::last_error.c_str(); }

void offgrid_clear_error(void) { offgrid::capi::clear_error(); }

const char * offgrid_status_name(offgrid_status status) {
    switch (status) {
        case OFFGRID_OK: return "ok";
        case OFFGRID_ERROR_INVALID_ARGUMENT: return "invalid argument";
        case OFFGRID_ERROR_FILE: return "file error";
        case OFFGRID_ERROR_NO_SPACE: return "no space";
        case OFFGRID_ERROR_INVALID_BATCH: return "invalid batch";
        case OFFGRID_ERROR_ABORTED: return "aborted";
        case OFFGRID_ERROR_FAILED: return "failed";
        case OFFGRID_ERROR_BUFFER_TOO_SMALL: return "buffer too small";
        case OFFGRID_ERROR_OUT_OF_MEMORY: return "out of memory";
        case OFFGRID_ERROR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char * offgrid_version(void) { return offgrid::version_string(); }

const char * offgrid_isa(void) { return offgrid::active_isa_name(); }

offgrid_status offgrid_set_activation_mode(const char * mode) {
    return offgrid::capi::guard(OFFGRID_ERROR_FAILED, [&] {
        const std::string m = offgrid::capi::require(mode, "mode");
        if (m != "int16" && m != "int8" && m != "f32") {
            throw offgrid::capi::StatusError(OFFGRID_ERROR_INVALID_ARGUMENT, "mode must be int16, int8 or f32, not '" + m + "'");
        }
        offgrid::set_activation_mode(mode);
    });
}

const char * offgrid_activation_mode(void) { return offgrid::activation_mode_name(); }

void offgrid_set_expert_rows16(int on) { offgrid::set_expert_rows16(on != 0); }

int offgrid_expert_rows16(void) { return offgrid::expert_rows16() ? 1 : 0; }

}  // extern "C"
