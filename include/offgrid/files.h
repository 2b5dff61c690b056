// Files the project reads and writes.
//
// Every file the project writes (models, states, logit records, logs, plots) goes through AtomicFile: the bytes
// go to a temporary file beside the target (same directory, so the same file system), are flushed and fsync'ed,
// and only then renamed over the target. A failed or abandoned write removes the temporary file, so the target
// is either untouched or complete; nothing ever truncates a file in place.
//
// Files that must not be replaced while this process uses them (a memory-mapped model) are registered with
// ProtectedFile; a write whose target is one of them (same device and inode, under any name) is refused, both
// by check_output_path (call it before the work that produces the output) and when the write starts and ends.
//
// Thread safety: the registry is guarded by a mutex; an AtomicFile object is used by one thread at a time.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace offgrid {

// While alive, the file (device + inode) cannot be the target of an AtomicFile. Registrations of one file count
// up and down (two readers of one model keep it protected until both are gone).
class ProtectedFile {
public:
    ProtectedFile() = default;
    ProtectedFile(uint64_t dev, uint64_t ino);
    ~ProtectedFile();
    ProtectedFile(ProtectedFile && o) noexcept;
    ProtectedFile & operator=(ProtectedFile && o) noexcept;
    ProtectedFile(const ProtectedFile &) = delete;
    ProtectedFile & operator=(const ProtectedFile &) = delete;

private:
    void release();
    bool active_ = false;
    uint64_t dev_ = 0, ino_ = 0;
};

// Throws offgrid::Error (naming `what`, e.g. "--state-save", and the path) when `path` cannot be an output: it
// is empty, a directory or another non-regular file, a protected (open) file, or its directory is missing.
void check_output_path(const std::string & path, const std::string & what);

class AtomicFile {
public:
    // Checks the target (check_output_path) and creates the temporary file. Throws offgrid::Error.
    AtomicFile(std::string path, std::string what = "output");
    ~AtomicFile();  // without commit(): the temporary file is removed, the target untouched
    AtomicFile(const AtomicFile &) = delete;
    AtomicFile & operator=(const AtomicFile &) = delete;

    // Buffered stream of the temporary file (for fprintf); errors are collected and reported by commit().
    std::FILE * stream() { return f_; }
    void write(const void * data, size_t n);
    // Flush, fsync, close, rename over the target (refused if it became a protected file). Throws offgrid::Error.
    void commit();
    const std::string & path() const { return path_; }

private:
    void discard();
    std::string path_, what_, tmp_;
    std::FILE * f_ = nullptr;
    bool committed_ = false;
};

// The whole file through one AtomicFile.
void write_file_atomic(const std::string & path, std::span<const uint8_t> bytes, const std::string & what = "output");
void write_file_atomic(const std::string & path, const std::string & text, const std::string & what = "output");

// Reads a whole regular file (checked with stat first, so a FIFO or a directory is refused by name rather than
// blocking or failing inside the stream library). `what` names the file's role in errors ("prompt file").
std::vector<uint8_t> read_file_bytes(const std::string & path, const std::string & what);
std::string read_file_text(const std::string & path, const std::string & what);

}  // namespace offgrid
