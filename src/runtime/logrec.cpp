#include "runtime/logrec.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "common/error.h"

namespace offgrid::runtime {

namespace {
constexpr char kMagic[8] = {'L', 'O', 'G', 'R', 'E', 'C', '0', '1'};
}

LogrecWriter::LogrecWriter(const std::string & path, int32_t n_vocab) : path_(path), n_vocab_(n_vocab) {
    f_ = std::fopen(path.c_str(), "wb");
    if (f_ == nullptr) {
        throw Error(path + ": cannot open for writing");
    }
    const int32_t head[2] = {n_vocab, 0};
    std::fwrite(kMagic, 1, sizeof(kMagic), f_);
    std::fwrite(head, sizeof(int32_t), 2, f_);
}

LogrecWriter::~LogrecWriter() {
    if (f_ != nullptr) {
        std::fclose(f_);
    }
}

void LogrecWriter::write(int32_t step, int32_t seq, int32_t pos, int32_t tok, const float * logits) {
    const int32_t meta[4] = {step, seq, pos, tok};
    std::fwrite(meta, sizeof(int32_t), 4, f_);
    std::fwrite(logits, sizeof(float), static_cast<size_t>(n_vocab_), f_);
}

void LogrecWriter::close() {
    if (f_ == nullptr) {
        return;
    }
    const bool bad = std::ferror(f_) != 0;
    const bool close_failed = std::fclose(f_) != 0;
    f_ = nullptr;
    if (bad || close_failed) {
        throw Error(path_ + ": write failed");
    }
}

Logrec Logrec::read(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        throw Error(path + ": cannot open");
    }
    const std::vector<char> buf((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (buf.size() < 16 || std::memcmp(buf.data(), kMagic, 8) != 0) {
        throw FileError(path, 0, "magic", "not a LOGREC01 file");
    }
    Logrec rec;
    std::memcpy(&rec.n_vocab, buf.data() + 8, 4);
    if (rec.n_vocab <= 0) {
        throw FileError(path, 8, "row width", "must be positive");
    }
    const size_t row_bytes = 16 + 4 * static_cast<size_t>(rec.n_vocab);
    if ((buf.size() - 16) % row_bytes != 0) {
        throw FileError(path, 16 + (buf.size() - 16) / row_bytes * row_bytes, "row", "truncated");
    }
    for (size_t off = 16; off < buf.size(); off += row_bytes) {
        LogitRow row;
        int32_t meta[4];
        std::memcpy(meta, buf.data() + off, 16);
        row.step = meta[0];
        row.seq = meta[1];
        row.pos = meta[2];
        row.tok = meta[3];
        row.logits.resize(static_cast<size_t>(rec.n_vocab));
        std::memcpy(row.logits.data(), buf.data() + off + 16, 4 * row.logits.size());
        rec.rows.push_back(std::move(row));
    }
    return rec;
}

}  // namespace offgrid::runtime
