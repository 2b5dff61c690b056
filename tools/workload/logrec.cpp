#include "workload/logrec.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "offgrid/error.h"
#include "offgrid/files.h"

namespace offgrid::tools {

namespace {
constexpr char kMagic[8] = {'L', 'O', 'G', 'R', 'E', 'C', '0', '1'};
}

LogrecWriter::LogrecWriter(const std::string & path, int32_t n_vocab)
    : path_(path), file_(std::make_unique<AtomicFile>(path, "logit record")), n_vocab_(n_vocab) {
    const int32_t head[2] = {n_vocab, 0};
    file_->write(kMagic, sizeof(kMagic));
    file_->write(head, sizeof(head));
}

LogrecWriter::~LogrecWriter() = default;  // without close(), the temporary file is removed

void LogrecWriter::write(int32_t step, int32_t seq, int32_t pos, int32_t tok, const float * logits) {
    const int32_t meta[4] = {step, seq, pos, tok};
    file_->write(meta, sizeof(meta));
    file_->write(logits, sizeof(float) * static_cast<size_t>(n_vocab_));
}

void LogrecWriter::close() {
    if (file_) file_->commit();
}

Logrec Logrec::read(const std::string & path) {
    const std::vector<uint8_t> buf = read_file_bytes(path, "logit record");
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

}  // namespace offgrid::tools
