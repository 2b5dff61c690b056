#include "common/files.h"

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"

namespace offgrid {

namespace {

// Both live until the process ends and are never destroyed: a model held in a static (a test's cache of loaded
// models) releases its ProtectedFile during exit, possibly after function-local statics are gone.
std::mutex & registry_mutex() {
    static auto * m = new std::mutex;
    return *m;
}

std::map<std::pair<uint64_t, uint64_t>, int> & registry() {
    static auto * r = new std::map<std::pair<uint64_t, uint64_t>, int>;
    return *r;
}

bool is_protected(uint64_t dev, uint64_t ino) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    return registry().count({dev, ino}) > 0;
}

std::string errno_text() { return std::strerror(errno); }

std::string dir_of(const std::string & path) {
    const size_t slash = path.rfind('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

// The target as it is now: refused when it exists and is not a plain file, or is a protected one.
void check_existing_target(const std::string & path, const std::string & what) {
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) return;
        throw Error(what + ": " + path + ": " + errno_text());
    }
    if (S_ISDIR(st.st_mode)) throw Error(what + ": " + path + " is a directory");
    if (!S_ISREG(st.st_mode)) throw Error(what + ": " + path + " is not a regular file");
    if (is_protected(st.st_dev, st.st_ino)) {
        throw Error(what + ": " + path + " is the model file this process has open; refusing to replace it");
    }
}

}  // namespace

ProtectedFile::ProtectedFile(uint64_t dev, uint64_t ino) : active_(true), dev_(dev), ino_(ino) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    ++registry()[{dev, ino}];
}

ProtectedFile::~ProtectedFile() { release(); }

ProtectedFile::ProtectedFile(ProtectedFile && o) noexcept : active_(o.active_), dev_(o.dev_), ino_(o.ino_) {
    o.active_ = false;
}

ProtectedFile & ProtectedFile::operator=(ProtectedFile && o) noexcept {
    if (this != &o) {
        release();
        active_ = std::exchange(o.active_, false);
        dev_ = o.dev_;
        ino_ = o.ino_;
    }
    return *this;
}

void ProtectedFile::release() {
    if (!active_) return;
    active_ = false;
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto it = registry().find({dev_, ino_});
    if (it != registry().end() && --it->second == 0) registry().erase(it);
}

void check_output_path(const std::string & path, const std::string & what) {
    if (path.empty()) throw Error(what + ": empty file name");
    check_existing_target(path, what);
    const std::string dir = dir_of(path);
    struct stat st{};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        throw Error(what + ": " + path + ": directory " + dir + " does not exist");
    }
    if (::access(dir.c_str(), W_OK) != 0) throw Error(what + ": " + path + ": directory " + dir + " is not writable");
}

namespace {

// The temporary files of every AtomicFile not yet committed or discarded, for remove_temporary_files().
std::mutex g_temporaries_mutex;
std::set<std::string> g_temporaries;

void track_temporary(const std::string & tmp, bool live) {
    std::lock_guard<std::mutex> lock(g_temporaries_mutex);
    if (live) g_temporaries.insert(tmp);
    else g_temporaries.erase(tmp);
}

}  // namespace

void remove_temporary_files() {
    // try_lock: called on the way out of a process (an abort, a signal), which must not wait on a lock held by
    // the code it interrupted; then nothing is removed.
    if (!g_temporaries_mutex.try_lock()) return;
    for (const std::string & tmp : g_temporaries) ::unlink(tmp.c_str());
    g_temporaries.clear();
    g_temporaries_mutex.unlock();
}

AtomicFile::AtomicFile(std::string path, std::string what) : path_(std::move(path)), what_(std::move(what)) {
    check_output_path(path_, what_);
    // A unique name beside the target: same file system, so the rename is atomic.
    std::string templ = path_ + ".tmp.XXXXXX";
    const int fd = ::mkstemp(templ.data());
    if (fd < 0) throw Error(what_ + ": " + path_ + ": cannot create a temporary file beside it: " + errno_text());
    tmp_ = templ;
    track_temporary(tmp_, true);
    // mkstemp makes the file 0600; give it the mode an ordinary create would (0666 minus the umask).
    const mode_t mask = ::umask(0);
    ::umask(mask);
    ::fchmod(fd, 0666 & ~mask);
    f_ = ::fdopen(fd, "wb");
    if (f_ == nullptr) {
        ::close(fd);
        ::unlink(tmp_.c_str());
        throw Error(what_ + ": " + path_ + ": " + errno_text());
    }
}

AtomicFile::~AtomicFile() {
    if (!committed_) discard();
}

void AtomicFile::discard() {
    if (f_ != nullptr) {
        std::fclose(f_);
        f_ = nullptr;
    }
    if (!tmp_.empty()) {
        ::unlink(tmp_.c_str());
        track_temporary(tmp_, false);
        tmp_.clear();
    }
}

void AtomicFile::write(const void * data, size_t n) {
    if (n > 0 && f_ != nullptr) std::fwrite(data, 1, n, f_);
}

void AtomicFile::commit() {
    if (committed_ || f_ == nullptr) throw Error(what_ + ": " + path_ + ": already written");
    bool ok = std::fflush(f_) == 0 && std::ferror(f_) == 0;
    std::string why = ok ? std::string() : errno_text();
    if (ok && ::fsync(::fileno(f_)) != 0) {
        ok = false;
        why = errno_text();
    }
    const bool closed = std::fclose(f_) == 0;
    f_ = nullptr;
    if (!ok || !closed) {
        discard();
        throw Error(what_ + ": " + path_ + ": write failed" + (why.empty() ? std::string() : ": " + why));
    }
    try {
        check_existing_target(path_, what_);  // the target may have changed while the output was produced
    } catch (...) {
        discard();
        throw;
    }
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
        why = errno_text();
        discard();
        throw Error(what_ + ": " + path_ + ": cannot rename the written file into place: " + why);
    }
    track_temporary(tmp_, false);
    tmp_.clear();
    committed_ = true;
    // Make the rename itself durable.
    const int dfd = ::open(dir_of(path_).c_str(), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
}

void write_file_atomic(const std::string & path, std::span<const uint8_t> bytes, const std::string & what) {
    AtomicFile f(path, what);
    f.write(bytes.data(), bytes.size());
    f.commit();
}

void write_file_atomic(const std::string & path, const std::string & text, const std::string & what) {
    AtomicFile f(path, what);
    f.write(text.data(), text.size());
    f.commit();
}

std::vector<uint8_t> read_file_bytes(const std::string & path, const std::string & what) {
    if (path.empty()) throw Error(what + ": empty file name");
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0) throw Error(what + " " + path + ": " + errno_text());
    if (S_ISDIR(st.st_mode)) throw Error(what + " " + path + ": is a directory");
    if (!S_ISREG(st.st_mode)) throw Error(what + " " + path + ": not a regular file");
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw Error(what + " " + path + ": cannot open: " + errno_text());
    std::vector<uint8_t> out;
    try {
        out.reserve(static_cast<size_t>(st.st_size));
        uint8_t buf[1 << 16];
        for (;;) {
            const ssize_t n = ::read(fd, buf, sizeof(buf));
            if (n < 0) {
                if (errno == EINTR) continue;
                throw Error(what + " " + path + ": read error: " + errno_text());
            }
            if (n == 0) break;
            out.insert(out.end(), buf, buf + n);
        }
    } catch (const std::bad_alloc &) {
        ::close(fd);
        throw Error(what + " " + path + ": out of memory reading " + std::to_string(st.st_size) + " bytes");
    } catch (...) {
        ::close(fd);
        throw;
    }
    ::close(fd);
    return out;
}

std::string read_file_text(const std::string & path, const std::string & what) {
    const std::vector<uint8_t> b = read_file_bytes(path, what);
    return std::string(b.begin(), b.end());
}

}  // namespace offgrid
