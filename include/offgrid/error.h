// The exception type of the C++ API. Every failure to load, restore, parse or validate throws an Error whose
// message names what is wrong and where (the file, the byte offset, the field or flag). Decode failures are
// not exceptions: Context::decode returns a status (offgrid/context.h).
//
// Thread safety: errors are immutable values; copies may be read from any thread.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace offgrid {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string & message) : std::runtime_error(message) {}
};

// A failure inside a file: "FILE: at byte OFFSET: FIELD: what".
class FileError : public Error {
public:
    FileError(std::string file, uint64_t offset, std::string field, const std::string & what)
        : Error(file + ": at byte " + std::to_string(offset) + ": " + field + ": " + what),
          file_(std::move(file)), offset_(offset), field_(std::move(field)), detail_(what) {}

    const std::string & file() const { return file_; }
    uint64_t offset() const { return offset_; }
    const std::string & field() const { return field_; }
    const std::string & detail() const { return detail_; }  // the "what" part of the message

private:
    std::string file_;
    uint64_t offset_;
    std::string field_;
    std::string detail_;
};

}  // namespace offgrid
