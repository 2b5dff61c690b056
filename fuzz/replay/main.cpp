// Runs a libFuzzer target's entry point once on each input file, without libFuzzer, so that ctest replays the
// seed corpora (and the inputs of past findings kept in them) in every build, the sanitized one included.
// Arguments are files or folders (every regular file directly inside). A target's contract violation aborts, a
// sanitizer report ends the process: either fails the test. No input at all also fails (a misnamed folder must
// not pass silently).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int * argc, char *** argv);

int main(int argc, char ** argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    namespace fs = std::filesystem;
    std::vector<fs::path> files;
    for (int i = 1; i < argc; ++i) {
        const fs::path arg = argv[i];
        if (fs::is_directory(arg)) {
            for (const auto & e : fs::directory_iterator(arg)) {
                if (e.is_regular_file()) files.push_back(e.path());
            }
        } else if (fs::is_regular_file(arg)) {
            files.push_back(arg);
        } else {
            std::fprintf(stderr, "%s: no such file or folder\n", argv[i]);
            return 1;
        }
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) {
        std::fprintf(stderr, "no input files\n");
        return 1;
    }
    for (const auto & path : files) {
        std::ifstream in(path, std::ios::binary);
        const std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
        if (!in.good() && !in.eof()) {
            std::fprintf(stderr, "%s: cannot read\n", path.c_str());
            return 1;
        }
        // An empty vector's data() may be null; libFuzzer passes a valid pointer even for empty inputs.
        static const uint8_t kEmpty = 0;
        const auto * data = bytes.empty() ? &kEmpty : reinterpret_cast<const uint8_t *>(bytes.data());
        LLVMFuzzerTestOneInput(data, bytes.size());
    }
    std::printf("%zu inputs replayed\n", files.size());
    return 0;
}
