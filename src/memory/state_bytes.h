// Little-endian byte writer and bounds-checked reader for the memory's state sections (memory/state_io.h). The
// reader reports every failure as an offgrid::FileError at the byte offset in the whole state.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "memory/seq_set.h"

namespace offgrid::memory {

// The last position a state may hold: the batch rule's (positions below 2^31 - 2), so pos_max + 1 never
// overflows in a caller.
inline constexpr Pos kMaxStatePos = kPosInf - 2;

class StateWriter {
public:
    void u32(uint32_t v) { raw(&v, 4); }
    void i32(int32_t v) { raw(&v, 4); }
    void raw(const void * p, size_t n) {
        const auto * b = static_cast<const uint8_t *>(p);
        out.insert(out.end(), b, b + n);
    }
    void zeros(size_t n) { out.resize(out.size() + n, 0); }
    std::vector<uint8_t> out;
};

class StateReader {
public:
    // `base`: where d starts in the whole state, so messages give offsets in the state.
    StateReader(std::span<const uint8_t> d, const std::string & name, size_t base = 0) : d_(d), name_(name), base_(base) {}
    uint32_t u32(const char * field) {
        uint32_t v;
        raw(&v, 4, field);
        return v;
    }
    int32_t i32(const char * field) {
        int32_t v;
        raw(&v, 4, field);
        return v;
    }
    void raw(void * p, size_t n, const char * field) {
        const uint8_t * src = take(n, field);
        if (n > 0) std::memcpy(p, src, n);  // an empty destination may be a null pointer
    }
    const uint8_t * take(size_t n, const char * field) {
        if (n > d_.size() - off_) {
            fail(field, "truncated: " + std::to_string(n) + " bytes wanted, " + std::to_string(d_.size() - off_) + " left");
        }
        const uint8_t * p = d_.data() + off_;
        off_ += n;
        return p;
    }
    [[noreturn]] void fail(const std::string & field, const std::string & what) const {
        throw FileError(name_, base_ + off_, field, what);
    }
    size_t offset() const { return base_ + off_; }
    size_t left() const { return d_.size() - off_; }

private:
    std::span<const uint8_t> d_;
    std::string name_;
    size_t base_ = 0;
    size_t off_ = 0;
};

}  // namespace offgrid::memory
