// Time per decoded token at depth 1k and 32k on a `bench-small` preset model (generated into a temporary directory),
// QSA sparse and forced dense, and the 32k/1k ratio of each. Sparse should stay at or below 1.5.
// A plain executable that prints a table: bench_decode_depth [--threads N] [--gen N] [--depths A,B] [--model F]
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <thread>

#include <unistd.h>

#include "model/qwen4exp/gen_model.h"
#include "args/cli_args.h"
#include "model/qwen4exp/generator.h"
#include "benches/depth_bench.h"

int main(int argc, char ** argv) {
    using namespace offgrid;
    try {
        tools::DepthBenchParams p;
        p.depths = {1024, 32768};
        p.n_prompt = 0;
        p.n_gen = 64;
        // One thread by default: a one-token decode runs its attention on one thread anyway, and on a shared
        // two-core machine a second worker mostly measures the neighbours' load.
        int64_t threads = 1, gen = p.n_gen;
        std::string depths = "1024,32768", model_path;
        tools::ArgParser args;
        args.integer({"-t", "--threads"}, &threads, 1, 1024);
        args.integer({"-n", "--gen"}, &gen, 1, 100000);
        args.text({"-d", "--depths"}, &depths);
        args.text({"-m", "--model"}, &model_path);
        if (!args.parse(std::vector<std::string>(argv + 1, argv + argc))) {
            std::printf("usage: bench_decode_depth [-t N (default 1)] [-n DECODES (64)] [-d 1024,32768] [-m MODEL]\n");
            return 0;
        }
        p.n_threads = static_cast<int>(threads);
        p.n_gen = static_cast<uint32_t>(gen);
        p.depths.clear();
        for (const int64_t d : tools::parse_integer_list("--depths", depths, 0, 1 << 22)) p.depths.push_back(static_cast<uint32_t>(d));
        const bool tty = ::isatty(2) == 1;
        p.status = [tty](const std::string & s) {
            if (tty) std::fprintf(stderr, "\r%-60s", s.c_str());
        };

        std::filesystem::path tmp;
        if (model_path.empty()) {
            tmp = std::filesystem::temp_directory_path() / ("offgrid_decode_depth_" + std::to_string(::getpid()));
            std::filesystem::create_directories(tmp);
            model_path = (tmp / "bench.gguf").string();
            model::qwen4exp::write_model_file(model::qwen4exp::gen_preset("bench-small"), model_path);
        }
        const auto model = Model::load(model_path);
        std::printf("model: %s\nthreads: %d, %u timed one-token decodes per depth and mode\n", model->describe().c_str(),
                    p.n_threads, p.n_gen);
        const auto t0 = std::chrono::steady_clock::now();
        const auto results = tools::run_depth_bench(model, p);
        if (tty) std::fprintf(stderr, "\r%-60s\r", "");
        std::map<std::string, std::map<uint32_t, double>> ms;
        std::printf("%-7s %8s %14s %12s\n", "mode", "depth", "ms/token", "tokens/s");
        for (const auto & r : results) {
            std::printf("%-7s %8u %14.3f %12.1f\n", r.mode.c_str(), r.depth, r.ms_per_decoded_token(), r.gen_tokens_per_second());
            ms[r.mode][r.depth] = r.ms_per_decoded_token();
        }
        const uint32_t lo = p.depths.front(), hi = p.depths.back();
        for (const auto & [mode, by_depth] : ms) {
            std::printf("ratio %s %u/%u: %.2f\n", mode.c_str(), hi, lo, by_depth.at(hi) / by_depth.at(lo));
        }
        std::printf("total %.1f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        if (!tmp.empty()) std::filesystem::remove_all(tmp);
        return 0;
    } catch (const std::exception & e) {
        std::fprintf(stderr, "bench_decode_depth: %s\n", e.what());
        return 1;
    }
}
