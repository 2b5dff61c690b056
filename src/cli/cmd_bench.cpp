// `offgrid bench`: prompt-processing and decode speed at given depths, QSA sparse and forced dense; a table,
// JSON, or an SVG plot of decode time per token against depth.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "command.h"
#include "offgrid/files.h"
#include "offgrid/context.h"
#include "offgrid/distributed.h"
#include "offgrid/speculative.h"
#include "offgrid/system.h"
#include "offgrid/tokenizer.h"
#include "args/cli_args.h"
#include "models/default_model.h"
#include "benches/depth_bench.h"
#include "benches/spec_bench.h"

namespace offgrid::cli {

namespace {

constexpr const char * kUsage =
    "usage: offgrid bench [-m MODEL] [-d 0,1024,16384] [-p 512] [-n 128] [-t N] [--json] [--plot FILE.svg]\n"
    "\n"
    "Fills a context to each depth with pseudo-random tokens (QSA sparse), then measures from that state:\n"
    "prompt processing (-p tokens in -b sized calls) and decode (-n one-token calls), once with sparse QSA and\n"
    "once with QSA forced dense (the same cache contents).\n"
    "\n"
    "  -m, --model FILE        GGUF model (default: the built-in model)\n"
    "  -d, --depths LIST       comma-separated depths (default 0,1024,16384)\n"
    "  -p, --n-prompt N        prompt tokens per test (default 512; 0 = skip)\n"
    "  -n, --n-gen N           decoded tokens per test (default 128; 0 = skip)\n"
    "  -b, --batch-size N      tokens per decode call when filling and for the prompt test (default 512)\n"
    "  -ub, --ubatch-size N    tokens per micro-batch (default 512)\n"
    "  -t, --threads N         threads (default: the hardware's)\n"
    "  --mode sparse|dense|both  which QSA modes to measure (default both)\n"
    "  -ctk, -ctv T            K / V cache type: f16 (default), f32 or q8_0\n"
    "  --json                  print the results as JSON instead of the table\n"
    "  --plot FILE.svg         also draw decode time per token against depth for each mode\n"
    "  --compare FILE          with --plot: add llama.cpp's decode curve from `llama-bench -o json` output\n"
    "  --save-states DIR       save the filled context at each depth as DIR/depth-<depth>.ogstate\n"
    "  --load-state FILE       start from a saved state (its depth); -d may add deeper depths\n"
    "  -c, --ctx-size N        context cells (default: deepest depth plus the tests, or the model's context\n"
    "                          length with --save-states / --load-state, so saved states fit later runs);\n"
    "                          with --parallel: all cells, one stream per sequence, as `serve -c`\n"
    "  --mmap, --no-mmap       map the model file, or read it into memory (default: read when it takes at most\n"
    "                          half the available memory)\n"
    "  --act-quant M           activations of the quantised products: int16 (default), int8 (the speed path:\n"
    "                          prompts on the tile unit where the CPU has AMX), f32 (exact; docs/kernels.md)\n"
    "  --parallel LIST         instead: N parallel sequences decoding one token each per step (one call of N\n"
    "                          tokens, as the server batches them), for each N of the comma-separated list\n"
    "                          (1 is always measured too): total tokens/s and the ratio to one sequence\n"
    "  -r, --repetitions N     with --parallel: measure each count N times, in turns, keep the best (default 1)\n"
    "  --spec-type T           instead: speculative (draft-mtp or ngram-simple) against plain greedy decoding on\n"
    "                          passages of -f FILE, each depth + -p tokens long (-p default 64 here, -d default 0),\n"
    "                          -n tokens generated each, both in this run: acceptance, tokens per round, speed-up\n"
    "  -f, --file FILE         with --spec-type: the text the passages are cut from\n"
    "  --spec-prompts N        with --spec-type: passages per depth (default 8)\n"
    "  --spec-repeat           with --spec-type: each prompt ends with its passage's first half again\n"
    "  --spec-draft-n-max N, --spec-draft-n-min N, --spec-draft-p-min X, -md FILE   as for `offgrid run`\n"
    "  --split S, --rank-timeout S  under mpirun: as for `offgrid replay` (rank 0 prints the results, every rank\n"
    "                          its forward and message seconds; not with --spec-type, --save-states, --load-state)\n"
    "\n"
    "Before measuring, the same threads read a 1 GiB buffer (the bus, best of 5 rounds); each decode figure is\n"
    "also given as the weight bytes a token reads over its time, as a fraction of that bus figure.\n";

// One point of llama.cpp's decode curve: depth and ms per decoded token.
struct ComparePoint {
    uint32_t depth;
    double ms;
};

// The decode records (n_prompt 0, n_gen > 0) of `llama-bench -o json` output, sorted by depth. Throws
// offgrid::Error naming the file and the record for anything else than such an array.
std::vector<ComparePoint> read_compare(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path + ": cannot open the llama-bench JSON file");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
    if (doc.is_discarded()) throw Error(path + ": not valid JSON");
    if (!doc.is_array()) throw Error(path + ": not a llama-bench JSON array of records");
    std::vector<ComparePoint> out;
    for (size_t i = 0; i < doc.size(); ++i) {
        const auto & r = doc[i];
        const std::string where = path + ": record " + std::to_string(i) + ": ";
        if (!r.is_object()) throw Error(where + "not an object");
        for (const char * key : {"n_prompt", "n_gen", "n_depth", "avg_ts"}) {
            if (!r.contains(key) || !r[key].is_number() || r[key].get<double>() < 0) {
                throw Error(where + "no non-negative number '" + key + "'");
            }
        }
        if (r["n_prompt"].get<double>() != 0 || r["n_gen"].get<double>() == 0) continue;  // not a decode test
        const double ts = r["avg_ts"].get<double>();
        if (!(ts > 0)) throw Error(where + "avg_ts must be > 0");
        const double depth = r["n_depth"].get<double>();
        if (depth > (1u << 24)) throw Error(where + "n_depth is too large");
        out.push_back({static_cast<uint32_t>(depth), 1000.0 / ts});
    }
    if (out.empty()) throw Error(path + ": no decode record (n_prompt 0, n_gen > 0)");
    std::sort(out.begin(), out.end(), [](const ComparePoint & a, const ComparePoint & b) { return a.depth < b.depth; });
    for (size_t i = 1; i < out.size(); ++i) {
        if (out[i].depth == out[i - 1].depth) {
            throw Error(path + ": two decode records at depth " + std::to_string(out[i].depth) +
                        " (give one model and thread count)");
        }
    }
    return out;
}

std::string json_escape(const std::string & s) {
    std::string out;
    for (const char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += ch;
        } else if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out += buf;
        } else {
            out += ch;
        }
    }
    return out;
}

std::string svg_plot(const std::vector<tools::DepthBenchResult> & results, const std::vector<ComparePoint> & peer,
                     const std::string & title) {
    const double W = 640, H = 400, left = 70, right = 20, top = 40, bottom = 50;
    double max_depth = 1, max_ms = 0;
    for (const auto & r : results) {
        max_depth = std::max<double>(max_depth, r.depth);
        max_ms = std::max(max_ms, r.ms_per_decoded_token());
    }
    for (const auto & c : peer) {
        max_depth = std::max<double>(max_depth, c.depth);
        max_ms = std::max(max_ms, c.ms);
    }
    max_ms = max_ms > 0 ? max_ms * 1.1 : 1;
    auto x = [&](double d) { return left + (W - left - right) * d / max_depth; };
    auto y = [&](double ms) { return H - bottom - (H - top - bottom) * ms / max_ms; };
    std::string s;
    char buf[512];
    std::snprintf(buf, sizeof(buf),
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
                  "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                  W, H);
    s += buf;
    std::string t = title;
    for (const char * bad : {"&", "<", ">"}) {
        for (size_t p = t.find(bad); p != std::string::npos; p = t.find(bad)) t.erase(p, 1);
    }
    std::snprintf(buf, sizeof(buf), "<text x=\"%.0f\" y=\"20\">decode time per token vs depth: %s</text>\n", left,
                  t.substr(0, 60).c_str());
    s += buf;
    // Axes, y ticks at fifths of the range, x ticks at each measured depth.
    std::snprintf(buf, sizeof(buf),
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n"
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
                  left, H - bottom, W - right, H - bottom, left, H - bottom, left, top);
    s += buf;
    for (int i = 0; i <= 5; ++i) {
        const double ms = max_ms * i / 5;
        std::snprintf(buf, sizeof(buf),
                      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                      "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.2f</text>\n",
                      left, y(ms), W - right, y(ms), left - 5, y(ms) + 4, ms);
        s += buf;
    }
    std::vector<uint32_t> depths;
    for (const auto & r : results) depths.push_back(r.depth);
    for (const auto & c : peer) depths.push_back(c.depth);
    std::sort(depths.begin(), depths.end());
    depths.erase(std::unique(depths.begin(), depths.end()), depths.end());
    for (const uint32_t d : depths) {
        std::snprintf(buf, sizeof(buf), "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%u</text>\n", x(d),
                      H - bottom + 16, d);
        s += buf;
    }
    std::snprintf(buf, sizeof(buf),
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">depth (tokens in the context)</text>\n"
                  "<text x=\"15\" y=\"%.1f\" transform=\"rotate(-90 15 %.1f)\" text-anchor=\"middle\">ms per decoded "
                  "token</text>\n",
                  (left + W - right) / 2, H - 12, (top + H - bottom) / 2, (top + H - bottom) / 2);
    s += buf;
    int legend = 0;
    for (const char * mode : {"sparse", "dense"}) {
        const char * colour = std::strcmp(mode, "sparse") == 0 ? "#1f77b4" : "#d62728";
        std::string points;
        for (const auto & r : results) {
            if (r.mode != mode || r.n_gen == 0) continue;
            std::snprintf(buf, sizeof(buf), "%.1f,%.1f ", x(r.depth), y(r.ms_per_decoded_token()));
            points += buf;
            std::snprintf(buf, sizeof(buf), "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", x(r.depth),
                          y(r.ms_per_decoded_token()), colour);
            s += buf;
        }
        if (points.empty()) continue;
        s += "<polyline fill=\"none\" stroke=\"" + std::string(colour) + "\" stroke-width=\"2\" points=\"" + points + "\"/>\n";
        std::snprintf(buf, sizeof(buf),
                      "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"3\" fill=\"%s\"/><text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                      left + 10, top + 10 + 16.0 * legend, colour, left + 28, top + 15 + 16.0 * legend, mode);
        s += buf;
        ++legend;
    }
    if (!peer.empty()) {
        const char * colour = "#2ca02c";
        std::string points;
        for (const auto & c : peer) {
            std::snprintf(buf, sizeof(buf), "%.1f,%.1f ", x(c.depth), y(c.ms));
            points += buf;
            std::snprintf(buf, sizeof(buf), "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", x(c.depth),
                          y(c.ms), colour);
            s += buf;
        }
        s += "<polyline fill=\"none\" stroke=\"" + std::string(colour) + "\" stroke-width=\"2\" stroke-dasharray=\"6 3\" points=\"" +
             points + "\"/>\n";
        std::snprintf(buf, sizeof(buf),
                      "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"3\" fill=\"%s\"/><text x=\"%.1f\" y=\"%.1f\">llama.cpp</text>\n",
                      left + 10, top + 10 + 16.0 * legend, colour, left + 28, top + 15 + 16.0 * legend);
        s += buf;
    }
    s += "</svg>\n";
    return s;
}

// The --parallel table (or JSON): per depth and sequence count, total decode tokens/s and the ratio to one sequence
// at the same depth in the same run.
void print_parallel(const std::vector<tools::ParallelBenchResult> & results, const std::string & model_path,
                    const Model & model, int threads, int repetitions, bool json) {
    auto single = [&](uint32_t depth) {
        for (const auto & r : results)
            if (r.depth == depth && r.n_seq == 1) return r.tokens_per_second();
        return 0.0;
    };
    if (json) {
        std::printf("{\n  \"model\": \"%s\",\n  \"description\": \"%s\",\n  \"threads\": %d,\n"
                    "  \"isa\": \"%s\",\n  \"isa_detected\": \"%s\",\n  \"activations\": \"%s\",\n"
                    "  \"repetitions\": %d,\n  \"parallel\": [\n",
                    json_escape(model_path).c_str(), json_escape(model.describe()).c_str(), threads,
                    active_isa_name(), detected_isa_name(), activation_mode_name(), repetitions);
        for (size_t i = 0; i < results.size(); ++i) {
            const auto & r = results[i];
            const double one = single(r.depth);
            std::printf("    {\"n_seq\": %u, \"depth\": %u, \"steps\": %u, \"seconds\": %.6f, \"tokens_per_second\": %.3f, "
                        "\"ms_per_step\": %.4f, \"ratio_to_one\": %.4f}%s\n",
                        r.n_seq, r.depth, r.n_gen, r.gen_seconds, r.tokens_per_second(), r.ms_per_step(),
                        one > 0 ? r.tokens_per_second() / one : 0.0, i + 1 < results.size() ? "," : "");
        }
        std::printf("  ]\n}\n");
        return;
    }
    std::printf("model: %s\nthreads: %d\nisa: %s (detected %s), activations %s\nrounds: %d (the best is shown)\n",
                model.describe().c_str(), threads, active_isa_name(), detected_isa_name(), activation_mode_name(),
                repetitions);
    std::printf("| %5s | %8s | %13s | %13s | %10s | %11s |\n", "n_seq", "depth", "total t/s", "t/s per seq",
                "ms/step", "ratio to 1");
    std::printf("|-------|----------|---------------|---------------|------------|-------------|\n");
    for (const auto & r : results) {
        const double one = single(r.depth);
        std::printf("| %5u | %8u | %13.1f | %13.1f | %10.3f | %11.2f |\n", r.n_seq, r.depth, r.tokens_per_second(),
                    r.tokens_per_second() / r.n_seq, r.ms_per_step(), one > 0 ? r.tokens_per_second() / one : 0.0);
    }
}

// The --spec-type table (or JSON).
int spec_bench(tools::SpecBenchParams sbp, std::string model_path, WeightLoad weights, const std::string & file,
               const std::string & depths, int64_t n_prompt, int64_t n_gen, int64_t n_batch, int64_t threads, bool json) {
    sbp.depths.clear();
    for (const int64_t d : tools::parse_integer_list("-d", depths.empty() ? "0" : depths, 0, 1 << 22))
        sbp.depths.push_back(static_cast<uint32_t>(d));
    sbp.n_prompt = static_cast<uint32_t>(std::max<int64_t>(n_prompt, 2));
    sbp.n_gen = static_cast<uint32_t>(std::max<int64_t>(n_gen, 1));
    sbp.n_batch = static_cast<uint32_t>(n_batch);
    sbp.n_threads = static_cast<int>(threads);
    if (model_path.empty()) model_path = tools::default_model_path();
    const auto model = Model::load(model_path, weights);
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error(file + ": cannot open");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    sbp.text = Tokenizer::from_model(*model).tokenize(text);
    const bool tty = ::isatty(2) == 1;
    sbp.status = [tty](const std::string & s) {
        if (tty) {
            std::fprintf(stderr, "\r%-60s", s.c_str());
            std::fflush(stderr);
        }
    };
    const auto results = tools::run_spec_bench(model, sbp);
    if (tty) std::fprintf(stderr, "\r%-60s\r", "");
    const char * type = spec_type_name(sbp.spec.type);
    if (json) {
        std::printf("{\n  \"model\": \"%s\",\n  \"spec_type\": \"%s\",\n  \"n_max\": %d,\n  \"p_min\": %.3f,\n"
                    "  \"threads\": %d,\n  \"repeat\": %s,\n  \"results\": [\n",
                    json_escape(model_path).c_str(), type, sbp.spec.n_max, sbp.spec.p_min, sbp.n_threads,
                    sbp.repeat ? "true" : "false");
        for (size_t i = 0; i < results.size(); ++i) {
            const auto & r = results[i];
            std::printf("    {\"depth\": %u, \"prompts\": %u, \"tokens\": %llu, \"plain_tokens_per_second\": %.3f, "
                        "\"spec_tokens_per_second\": %.3f, \"speedup\": %.4f, \"acceptance\": %.4f, "
                        "\"tokens_per_round\": %.4f, \"identical\": %u, \"decode_ms\": %.4f, \"verify_ms\": %.4f}%s\n",
                        r.depth, r.prompts, static_cast<unsigned long long>(r.tokens), r.plain_tps(), r.spec_tps(), r.speedup(),
                        r.stats.acceptance(), r.stats.tokens_per_round(), r.identical, r.decode_ms, r.verify_ms,
                        i + 1 < results.size() ? "," : "");
        }
        std::printf("  ]\n}\n");
    } else {
        std::printf("model: %s\nthreads: %d\nspeculative: %s, n_max %d, p_min %.2f%s; %u passages of %s per depth, %u tokens each\n",
                    model->describe().c_str(), sbp.n_threads, type, sbp.spec.n_max, sbp.spec.p_min,
                    sbp.repeat ? ", prompts repeat their passage's first half" : "", sbp.n_prompts, file.c_str(), sbp.n_gen);
        std::printf("| %8s | %12s | %12s | %8s | %10s | %12s | %9s |\n", "depth", "plain t/s", "spec t/s", "speed-up",
                    "accepted", "tokens/round", "identical");
        std::printf("|----------|--------------|--------------|----------|------------|--------------|-----------|\n");
        for (const auto & r : results) {
            std::printf("| %8u | %12.1f | %12.1f | %7.2fx | %9.1f%% | %12.2f | %4u / %-3u |\n", r.depth, r.plain_tps(),
                        r.spec_tps(), r.speedup(), 100.0 * r.stats.acceptance(), r.stats.tokens_per_round(), r.identical,
                        r.prompts);
        }
        for (const auto & r : results) {
            std::printf("depth %u: one decode call of 1 token %.3f ms, of %d tokens (a full verify) %.3f ms (%.2fx)\n",
                        r.depth, r.decode_ms, sbp.spec.n_max + 1, r.verify_ms, r.decode_ms > 0 ? r.verify_ms / r.decode_ms : 0.0);
        }
    }
    for (const auto & r : results) {
        if (r.identical != r.prompts) throw Error("bench: speculative output differed from plain decoding");
    }
    return 0;
}

int bench_main(const std::vector<std::string> & args) {
    return tools::run_with_usage("bench", [&]() -> int {
        std::string parallel;
        std::string model_path, depths, plot, mode = "both", ctk = "f16", ctv = "f16", compare, save_dir, load_state;
        int64_t repetitions = 1;
        int64_t n_prompt = 512, n_gen = 128, n_batch = 512, n_ubatch = 512, n_ctx = 0;
        int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, kMaxThreads);
        bool json = false;
        WeightLoad weights = WeightLoad::Auto;
        tools::ArgParser p;
        std::string spec_type, spec_file;
        tools::SpecBenchParams sbp;
        int64_t spec_n_max = sbp.spec.n_max, spec_n_min = sbp.spec.n_min, spec_prompts = sbp.n_prompts;
        p.text({"--spec-type"}, &spec_type);
        p.text({"-f", "--file"}, &spec_file);
        p.integer({"--spec-prompts"}, &spec_prompts, 1, 100000);
        p.flag({"--spec-repeat"}, &sbp.repeat);
        p.integer({"--spec-draft-n-max"}, &spec_n_max, 1, 64);
        p.integer({"--spec-draft-n-min"}, &spec_n_min, 0, 64);
        p.real({"--spec-draft-p-min"}, &sbp.spec.p_min, 0.0f, 1.0f);
        p.text({"-md", "--model-draft"}, &sbp.spec.draft_model);
        p.weight_load(&weights);
        p.activation_mode();
        p.text({"-m", "--model"}, &model_path);
        p.text({"-d", "--depths"}, &depths);
        p.integer({"-p", "--n-prompt"}, &n_prompt, 0, 1 << 20);
        p.integer({"-n", "--n-gen"}, &n_gen, 0, 1 << 20);
        p.integer({"-b", "--batch-size"}, &n_batch, 1, 1 << 20);
        p.integer({"-ub", "--ubatch-size"}, &n_ubatch, 1, 1 << 20);
        p.integer({"-t", "--threads"}, &threads, 1, kMaxThreads);
        p.text({"--mode"}, &mode);
        p.text({"-ctk", "--cache-type-k"}, &ctk);
        p.text({"-ctv", "--cache-type-v"}, &ctv);
        p.flag({"--json"}, &json);
        p.text({"--plot"}, &plot);
        p.text({"--compare"}, &compare);
        p.text({"--save-states"}, &save_dir);
        p.text({"--load-state"}, &load_state);
        p.integer({"-c", "--ctx-size"}, &n_ctx, 0, 1 << 24);
        p.text({"--parallel"}, &parallel);
        p.integer({"-r", "--repetitions"}, &repetitions, 1, 100);
        distributed::PipelineOptions po;
        p.text({"--split"}, &po.split);
        int64_t rank_timeout = 120;
        p.integer({"--rank-timeout"}, &rank_timeout, 1, 86400);
        if (!p.parse(args)) {
            std::fputs(kUsage, stdout);
            return 0;
        }
        if (p.given("-m") && model_path.empty()) throw tools::UsageError("-m: empty file name");
        // Under mpirun every rank runs the same measurement over its layers of the pipeline (docs/distributed.md).
        const bool piped = distributed::under_launcher() || !po.split.empty();
        if (piped && (!spec_type.empty() || !save_dir.empty() || !load_state.empty())) {
            throw tools::UsageError("under an MPI launcher or with --split, bench measures prompt and decode speed and "
                                    "--parallel only (not --spec-type, --save-states or --load-state)");
        }
        if (!spec_type.empty()) {
            try {
                sbp.spec.type = spec_type_from_name(spec_type);
            } catch (const Error & e) {
                throw tools::UsageError(std::string("--spec-type: ") + e.what());
            }
            if (sbp.spec.type == SpecType::None) throw tools::UsageError("--spec-type: draft-mtp or ngram-simple");
            if (spec_file.empty()) throw tools::UsageError("--spec-type: give the text with -f FILE");
            sbp.spec.n_max = static_cast<int32_t>(spec_n_max);
            sbp.spec.n_min = static_cast<int32_t>(spec_n_min);
            sbp.n_prompts = static_cast<uint32_t>(spec_prompts);
            return spec_bench(sbp, model_path, weights, spec_file, depths, p.given("-p") ? n_prompt : 64,
                              n_gen, n_batch, threads, json);
        }
        if (p.given("--plot") && plot.empty()) throw tools::UsageError("--plot: empty file name");
        if (!plot.empty()) check_output_path(plot, "--plot");  // before the (long) measurement
        if (!save_dir.empty()) {
            std::error_code ec;
            if (!std::filesystem::is_directory(save_dir, ec)) {
                throw tools::UsageError("--save-states: directory " + save_dir + " does not exist");
            }
        }
        if (!compare.empty() && plot.empty()) throw tools::UsageError("--compare: only with --plot");
        // Read before the (long) measurement, so a bad file costs nothing.
        const std::vector<ComparePoint> peer = compare.empty() ? std::vector<ComparePoint>{} : read_compare(compare);
        tools::DepthBenchParams bp;
        bp.depths.clear();
        if (depths.empty() && load_state.empty()) depths = parallel.empty() ? "0,1024,16384" : "0";
        if (!depths.empty()) {
            for (const int64_t d : tools::parse_integer_list("-d", depths, 0, 1 << 22)) bp.depths.push_back(static_cast<uint32_t>(d));
        }
        bp.save_states_dir = save_dir;
        bp.load_state = load_state;
        bp.n_ctx = static_cast<uint32_t>(n_ctx);
        if (mode != "both" && mode != "sparse" && mode != "dense") {
            throw tools::UsageError("--mode: '" + mode + "' is not sparse, dense or both");
        }
        for (const std::string * t : {&ctk, &ctv}) {
            if (*t != "f16" && *t != "f32" && *t != "q8_0") {
                throw tools::UsageError("cache type '" + *t + "' is not f16, f32 or q8_0");
            }
        }
        if (n_prompt == 0 && n_gen == 0) throw tools::UsageError("nothing to measure: -p and -n are both 0");
        bp.sparse = mode != "dense";
        bp.dense = mode != "sparse";
        bp.n_prompt = static_cast<uint32_t>(n_prompt);
        bp.n_gen = static_cast<uint32_t>(n_gen);
        bp.n_batch = static_cast<uint32_t>(n_batch);
        bp.n_ubatch = static_cast<uint32_t>(n_ubatch);
        bp.n_threads = static_cast<int>(threads);
        bp.type_k = ctk;
        bp.type_v = ctv;
        const bool tty = ::isatty(2) == 1;
        bp.status = [tty](const std::string & s) {
            if (tty) {
                std::fprintf(stderr, "\r%-60s", s.c_str());
                std::fflush(stderr);
            }
        };

        if (model_path.empty()) model_path = tools::default_model_path();
        po.timeout = static_cast<double>(rank_timeout);
        const distributed::Pipeline pipe = piped ? distributed::start_pipeline(model_path, po) : distributed::Pipeline{};
        const auto model = pipe.model ? pipe.model : Model::load(model_path, weights);
        // Every rank's figures on stderr at the end: its layers' forward seconds and its message seconds.
        struct RankFigures {
            const distributed::Pipeline & pipe;
            ~RankFigures() {
                if (pipe.report) std::fprintf(stderr, "bench: %s\n", pipe.report().c_str());
                distributed::end_pipeline();
            }
        } rank_figures{pipe};
        if (!pipe.writes_outputs()) {
            if (std::freopen("/dev/null", "w", stdout) == nullptr) throw Error("cannot silence rank " + std::to_string(pipe.rank));
            plot.clear();
        }
        if (pipe.size > 1) {
            std::fprintf(stderr, "bench: rank %d of %d runs layers %s of split %s\n", pipe.rank, pipe.size,
                         pipe.layers.c_str(), pipe.split.c_str());
        }
        if (!plot.empty()) check_output_path(plot, "--plot");  // also refuses the model's own file
        const uint64_t deepest = (bp.depths.empty() ? 0 : *std::max_element(bp.depths.begin(), bp.depths.end())) +
                                 static_cast<uint64_t>(std::max(n_prompt, n_gen));
        if (deepest > model->n_ctx_train()) {
            throw Error("depth " + std::to_string(deepest - std::max(n_prompt, n_gen)) + " plus " +
                        std::to_string(std::max(n_prompt, n_gen)) + " test tokens exceeds the model's context length " +
                        std::to_string(model->n_ctx_train()));
        }
        if (!parallel.empty()) {
            if (!plot.empty() || !save_dir.empty() || !load_state.empty()) {
                throw tools::UsageError("--parallel: not with --plot, --save-states or --load-state");
            }
            std::vector<uint32_t> n_seqs{1};
            for (const int64_t n : tools::parse_integer_list("--parallel", parallel, 1, 256)) {
                if (std::find(n_seqs.begin(), n_seqs.end(), static_cast<uint32_t>(n)) == n_seqs.end()) {
                    n_seqs.push_back(static_cast<uint32_t>(n));
                }
            }
            if (pipe.meet) pipe.meet();
            const auto pr = tools::run_parallel_bench(model, bp, n_seqs, static_cast<uint32_t>(repetitions));
            if (tty) std::fprintf(stderr, "\r%-60s\r", "");
            print_parallel(pr, model_path, *model, bp.n_threads, static_cast<int>(repetitions), json);
            return 0;
        }
        // The bus is read before the measurements and after them: on a shared machine it can move by half between
        // runs, so the fraction is taken against the larger reading (the bus the measurements could have had).
        const double bus_before = measure_read_bandwidth(bp.n_threads).bytes_per_second;
        const double weight_bytes = static_cast<double>(model->weight_bytes_per_token());
        if (pipe.meet) pipe.meet();  // every rank's bus measurement is over
        const auto results = tools::run_depth_bench(model, bp);
        if (pipe.meet) pipe.meet();  // every rank's measurements are over
        const double bus_after = measure_read_bandwidth(bp.n_threads).bytes_per_second;
        const double bus = std::max(bus_before, bus_after);
        // Weight bytes per token over the time per token, as a fraction of the bus.
        auto bus_fraction = [&](const tools::DepthBenchResult & r) {
            return r.gen_seconds > 0 && bus > 0 ? weight_bytes * r.n_gen / r.gen_seconds / bus : 0.0;
        };
        if (tty) std::fprintf(stderr, "\r%-60s\r", "");

        if (json) {
            std::printf("{\n  \"model\": \"%s\",\n  \"description\": \"%s\",\n  \"threads\": %d,\n"
                        "  \"isa\": \"%s\",\n  \"isa_detected\": \"%s\",\n  \"activations\": \"%s\",\n"
                        "  \"bus_bytes_per_second\": %.0f,\n  \"bus_before_bytes_per_second\": %.0f,\n"
                        "  \"bus_after_bytes_per_second\": %.0f,\n  \"weight_bytes_per_token\": %.0f,\n  \"results\": [\n",
                        json_escape(model_path).c_str(), json_escape(model->describe()).c_str(), bp.n_threads,
                        active_isa_name(), detected_isa_name(), activation_mode_name(), bus, bus_before, bus_after,
                        weight_bytes);
            for (size_t i = 0; i < results.size(); ++i) {
                const auto & r = results[i];
                std::printf("    {\"mode\": \"%s\", \"depth\": %u, \"n_prompt\": %u, \"prompt_seconds\": %.6f, "
                            "\"prompt_tokens_per_second\": %.3f, \"n_gen\": %u, \"gen_seconds\": %.6f, "
                            "\"gen_tokens_per_second\": %.3f, \"ms_per_token\": %.4f, \"bus_fraction\": %.4f}%s\n",
                            r.mode.c_str(), r.depth, r.n_prompt, r.prompt_seconds, r.prompt_tokens_per_second(), r.n_gen,
                            r.gen_seconds, r.gen_tokens_per_second(), r.ms_per_decoded_token(), bus_fraction(r),
                            i + 1 < results.size() ? "," : "");
            }
            std::printf("  ]\n}\n");
        } else {
            std::printf("model: %s\nthreads: %d\nisa: %s (detected %s), activations %s\n", model->describe().c_str(),
                        bp.n_threads, active_isa_name(), detected_isa_name(), activation_mode_name());
            std::printf("bus: %.1f GB/s before, %.1f after (%d threads reading 1 GiB); weights read per token: %.1f MB\n",
                        bus_before / 1e9, bus_after / 1e9, bp.n_threads, weight_bytes / 1e6);
            std::printf("| %-6s | %8s | %14s | %14s | %10s | %8s |\n", "mode", "depth", ("pp" + std::to_string(n_prompt) + " t/s").c_str(),
                        ("tg" + std::to_string(n_gen) + " t/s").c_str(), "ms/token", "% of bus");
            std::printf("|--------|----------|----------------|----------------|------------|----------|\n");
            for (const auto & r : results) {
                std::printf("| %-6s | %8u | %14.1f | %14.1f | %10.3f | %8.1f |\n", r.mode.c_str(), r.depth,
                            r.prompt_tokens_per_second(), r.gen_tokens_per_second(), r.ms_per_decoded_token(),
                            100.0 * bus_fraction(r));
            }
        }
        if (!plot.empty()) write_file_atomic(plot, svg_plot(results, peer, model->describe()));
        return 0;
    });
}

}  // namespace

OFFGRID_COMMAND("bench", "prompt and decode speed at given depths, QSA sparse and dense", bench_main);

}  // namespace offgrid::cli
