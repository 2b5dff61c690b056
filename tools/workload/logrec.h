// LOGREC01: the golden set's binary record of logit rows (/work/shared/golden/README.md), little endian:
// "LOGREC01", int32 row width (n_vocab), int32 0; then per row int32 step, seq, pos, tok and float logits[width].
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace offgrid {
class AtomicFile;
}

namespace offgrid::tools {

struct LogitRow {
    int32_t step = 0;
    int32_t seq = 0;
    int32_t pos = 0;
    int32_t tok = 0;
    std::vector<float> logits;
};

class LogrecWriter {
public:
    // Starts the file (through a temporary file beside it) and writes the header. Throws offgrid::Error.
    // Nothing reaches `path` until close(): a writer destroyed without close() leaves the target untouched.
    LogrecWriter(const std::string & path, int32_t n_vocab);
    ~LogrecWriter();
    LogrecWriter(const LogrecWriter &) = delete;
    LogrecWriter & operator=(const LogrecWriter &) = delete;

    void write(int32_t step, int32_t seq, int32_t pos, int32_t tok, const float * logits);
    void close();  // flushes and renames into place; throws if the disk write failed

private:
    std::string path_;
    std::unique_ptr<AtomicFile> file_;
    int32_t n_vocab_;
};

struct Logrec {
    int32_t n_vocab = 0;
    std::vector<LogitRow> rows;

    static Logrec read(const std::string & path);  // throws offgrid::FileError on a malformed file
};

}  // namespace offgrid::tools
