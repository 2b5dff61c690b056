// What the C interface's opaque handles hold, and the guard every entry point runs its body in.
//
// Invariants: no exception leaves an entry point (guard catches everything and turns it into a status and a
// per-thread message); a context and a tokenizer hold a shared_ptr to their model, so freeing the model handle
// first is safe.
#pragma once

#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "offgrid.h"
#include "offgrid/context.h"
#include "offgrid/sampler.h"
#include "offgrid/tokenizer.h"

struct offgrid_model {
    std::shared_ptr<const offgrid::Model> model;
};

struct offgrid_tokenizer {
    std::shared_ptr<const offgrid::Model> model;
    offgrid::Tokenizer tok;
};

struct offgrid_context {
    std::shared_ptr<const offgrid::Model> model;
    std::unique_ptr<offgrid::Context> ctx;
};

struct offgrid_sampler {
    offgrid::Sampler sampler;
};

namespace offgrid::capi {

// A failure with a chosen status (a bad argument, a buffer too small, a decode status).
class StatusError : public std::exception {
public:
    StatusError(offgrid_status status, std::string message) : status_(status), message_(std::move(message)) {}
    const char * what() const noexcept override { return message_.c_str(); }
    offgrid_status status() const { return status_; }

private:
    offgrid_status status_;
    std::string message_;
};

void set_error(offgrid_status status, const char * message) noexcept;
void clear_error() noexcept;

// Throws StatusError(INVALID_ARGUMENT) naming `what` when p is null.
template <class T>
T * require(T * p, const char * what) {
    if (!p) throw StatusError(OFFGRID_ERROR_INVALID_ARGUMENT, std::string(what) + " is NULL");
    return p;
}

// Runs body (returning nothing); offgrid::Error becomes `error_status` (FileError always OFFGRID_ERROR_FILE).
template <class F>
offgrid_status guard(offgrid_status error_status, F && body) noexcept {
    try {
        body();
        return OFFGRID_OK;
    } catch (const StatusError & e) {
        set_error(e.status(), e.what());
        return e.status();
    } catch (const offgrid::FileError & e) {
        set_error(OFFGRID_ERROR_FILE, e.what());
        return OFFGRID_ERROR_FILE;
    } catch (const offgrid::Error & e) {
        set_error(error_status, e.what());
        return error_status;
    } catch (const std::bad_alloc &) {
        set_error(OFFGRID_ERROR_OUT_OF_MEMORY, "out of memory");
        return OFFGRID_ERROR_OUT_OF_MEMORY;
    } catch (const std::exception & e) {
        set_error(OFFGRID_ERROR_INTERNAL, e.what());
        return OFFGRID_ERROR_INTERNAL;
    } catch (...) {
        set_error(OFFGRID_ERROR_INTERNAL, "unknown exception");
        return OFFGRID_ERROR_INTERNAL;
    }
}

// Copies `items` into a caller's buffer of `cap` elements and reports the count through `n` (may be null).
template <class T>
void copy_out(const std::vector<T> & items, T * out, size_t cap, size_t * n) {
    if (n) *n = items.size();
    if (items.size() > cap) {
        throw StatusError(OFFGRID_ERROR_BUFFER_TOO_SMALL, "the buffer holds " + std::to_string(cap) + ", " +
                                                              std::to_string(items.size()) + " needed");
    }
    if (!items.empty()) require(out, "the output buffer");
    for (size_t i = 0; i < items.size(); ++i) out[i] = items[i];
}

}  // namespace offgrid::capi
