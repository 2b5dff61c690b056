// `offgrid gguf-info`: lists every key and tensor that the Reader sees, as text and as JSON that parses.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "common/shared_dir.h"
#include "gguf/reader.h"
#include "gguf/writer.h"

using offgrid::gguf::Reader;
using offgrid::gguf::Value;
using offgrid::gguf::ValueType;
using offgrid::gguf::Writer;

namespace {

struct CommandResult {
    int status = -1;
    std::string out;
    std::string err;
};

std::string read_all(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

class GgufInfo : public ::testing::Test {
protected:
    void SetUp() override {
        if (!std::filesystem::exists(OFFGRID_BINARY)) {
            GTEST_FAIL() << OFFGRID_BINARY << " is missing: build the `offgrid` target too";
        }
        dir_ = std::filesystem::temp_directory_path() / ("offgrid_gguf_info_" + std::to_string(::getpid()));
        std::filesystem::create_directories(dir_);
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }

    std::string tmp(const std::string & name) const { return (dir_ / name).string(); }

    CommandResult run(const std::string & args) const {
        CommandResult r;
        const std::string cmd = std::string("'") + OFFGRID_BINARY + "' gguf-info " + args + " >'" + tmp("out") +
                                "' 2>'" + tmp("err") + "'";
        const int raw = std::system(cmd.c_str());
        r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
        r.out = read_all(tmp("out"));
        r.err = read_all(tmp("err"));
        return r;
    }

    // Parses out/JSON with python3 and prints one line per key, then "--", then one line per tensor.
    bool python_lists(const std::string & json_path, const std::string & list_path) const {
        const std::string script =
            "import json,sys; d=json.load(open(sys.argv[1],encoding='utf-8')); "
            "o=open(sys.argv[2],'w',encoding='utf-8'); "
            "[o.write(m['key']+'\\n') for m in d['metadata']]; o.write('--\\n'); "
            "[o.write(t['name']+' '+t['type']+' '+'x'.join(map(str,t['shape']))+' '+str(t['offset'])+' '+"
            "str(t['bytes'])+'\\n') for t in d['tensors']]";
        const std::string cmd = "python3 -c \"" + script + "\" '" + json_path + "' '" + list_path + "'";
        return std::system(cmd.c_str()) == 0;
    }

    std::filesystem::path dir_;
};

// A shell word in single quotes (paths here contain no quote).
std::string quoted(const std::string & s) {
    std::string out(1, '\'');
    out += s;
    out += '\'';
    return out;
}

bool have_python() { return std::system("python3 -c 'import json' >/dev/null 2>&1") == 0; }

std::vector<std::string> all_files() {
    std::vector<std::string> files = {offgrid::test::shared_dir() + "/data/ggml-vocab-qwen35.gguf"};
    for (const auto & e : std::filesystem::directory_iterator(offgrid::test::shared_dir() + "/golden/models")) {
        files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    return files;
}

std::string shape_of(const offgrid::gguf::TensorInfo & t) {
    std::string s;
    for (size_t d = 0; d < t.ne.size(); ++d) {
        if (d > 0) s += 'x';
        s += std::to_string(t.ne[d]);
    }
    return s;
}

}  // namespace

TEST_F(GgufInfo, TextListsEveryKeyAndTensor) {
    OFFGRID_REQUIRE_SHARED();
    for (const auto & path : all_files()) {
        SCOPED_TRACE(path);
        const Reader r = Reader::open(path);
        const CommandResult run_text = run(quoted(path));
        ASSERT_EQ(run_text.status, 0) << run_text.err;
        EXPECT_EQ(run_text.err, "");
        // Metadata lines are "  KEY TYPE VALUE" between "metadata (" and "tensors ("; tensor lines "  # NAME ...".
        std::istringstream lines(run_text.out);
        std::string line;
        std::vector<std::string> keys, tensors;
        int section = 0;
        while (std::getline(lines, line)) {
            if (line.rfind("metadata (", 0) == 0) { section = 1; continue; }
            if (line.rfind("tensors (", 0) == 0) { section = 2; continue; }
            if (line.empty() || section == 0) continue;
            std::istringstream fields(line);
            std::string first, second;
            fields >> first >> second;
            if (section == 1) keys.push_back(first);
            if (section == 2 && first != "#") tensors.push_back(second);
        }
        ASSERT_EQ(keys.size(), r.metadata().size());
        for (size_t k = 0; k < keys.size(); ++k) EXPECT_EQ(keys[k], r.metadata()[k].key);
        ASSERT_EQ(tensors.size(), r.tensors().size());
        for (size_t k = 0; k < tensors.size(); ++k) EXPECT_EQ(tensors[k], r.tensors()[k].name);
        if (r.find("tokenizer.ggml.tokens")->array.size() > 8) {
            std::string abbreviated = "[";
            abbreviated += std::to_string(r.find("tokenizer.ggml.tokens")->array.size());
            abbreviated += " items: ";
            EXPECT_NE(run_text.out.find(abbreviated), std::string::npos);
        }
    }
}

TEST_F(GgufInfo, JsonParsesAndListsEveryKeyAndTensor) {
    OFFGRID_REQUIRE_SHARED();
    if (!have_python()) GTEST_SKIP() << "python3 is not available to parse the JSON";
    for (const auto & path : all_files()) {
        SCOPED_TRACE(path);
        const Reader r = Reader::open(path);
        const CommandResult run_json = run(quoted(path) + " --json");
        ASSERT_EQ(run_json.status, 0) << run_json.err;
        ASSERT_TRUE(python_lists(tmp("out"), tmp("list"))) << "the JSON does not parse";
        std::string expected;
        for (const auto & kv : r.metadata()) expected += kv.key + "\n";
        expected += "--\n";
        for (const auto & t : r.tensors()) {
            expected += t.name + " " + std::string(offgrid::tensor::traits(t.type).name) + " " + shape_of(t) + " " +
                        std::to_string(t.offset) + " " + std::to_string(t.n_bytes) + "\n";
        }
        EXPECT_EQ(read_all(tmp("list")), expected);
    }
}

TEST_F(GgufInfo, JsonEscapesStringsAndFullPrintsWholeArrays) {
    if (!have_python()) GTEST_SKIP() << "python3 is not available to parse the JSON";
    Writer w;
    w.set_string("quote\"back\\slash", std::string("tab\tnl\nctl\x01 del\x7f \xc3\xa9 bad\xff\xc0\x80 end"));
    w.set_f32("nan", std::nanf(""));
    w.set_f32("inf", -INFINITY);
    std::vector<uint32_t> many(40);
    for (uint32_t k = 0; k < many.size(); ++k) many[k] = k * 3;
    w.set_u32s("many", many);
    w.set("nested", Value::make_array(ValueType::ARRAY, {Value::make_array(ValueType::I32, {Value::make_i32(-1)})}));
    w.write_file(tmp("esc.gguf"));
    for (const std::string flags : {"--json", "--json --full"}) {
        SCOPED_TRACE(flags);
        const CommandResult run_json = run(quoted(tmp("esc.gguf")) + " " + flags);
        ASSERT_EQ(run_json.status, 0) << run_json.err;
        const std::string check =
            "import json,sys,math; d=json.load(open(sys.argv[1],encoding='utf-8')); m={x['key']:x for x in d['metadata']}; "
            "assert m['quote\\\"back\\\\slash']['value']=='tab\\tnl\\nctl\\x01 del\\x7f \\u00e9 bad\\ufffd\\ufffd\\ufffd end', "
            "repr(m['quote\\\"back\\\\slash']['value']); "
            "assert m['nan']['value']=='nan' and m['inf']['value']=='-inf'; "
            "assert m['many']['count']==40 and m['many']['elem_type']=='u32'; "
            "v=m['many']['value']; full=sys.argv[2]=='1'; "
            "assert v==[k*3 for k in range(40 if full else 16)], v; assert m['many']['truncated']==(not full); "
            "assert m['nested']['value']==[[-1]]; assert d['tensors']==[]";
        const std::string cmd = "python3 -c \"" + check + "\" '" + tmp("out") + "' " +
                                (flags == "--json" ? "0" : "1");
        EXPECT_EQ(std::system(cmd.c_str()), 0) << run_json.out;
    }
}

TEST_F(GgufInfo, BadFilePrintsOneLineAndFails) {
    std::ofstream(tmp("bad.gguf"), std::ios::binary) << "GGUF\x03";
    const CommandResult bad = run(quoted(tmp("bad.gguf")));
    EXPECT_NE(bad.status, 0);
    EXPECT_EQ(bad.out, "");
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
    EXPECT_NE(bad.err.find("at byte 4: header.version"), std::string::npos) << bad.err;

    const CommandResult missing = run(quoted(tmp("nonexistent.gguf")));
    EXPECT_NE(missing.status, 0);
    EXPECT_EQ(std::count(missing.err.begin(), missing.err.end(), '\n'), 1) << missing.err;

    EXPECT_EQ(run("").status, 2);
    EXPECT_EQ(run("a b").status, 2);
    EXPECT_EQ(run("--bogus x").status, 2);
    EXPECT_EQ(run("--help").status, 0);
}

// Each tensor's type as the ecosystem names it: the type column of the quantised golden set's dequant/*.fnv
// (written with ggml's own type names) against gguf-info's text table, for files that mix up to seven types.
TEST_F(GgufInfo, TypeNamesAreGgmlsOnQuantisedFiles) {
    OFFGRID_REQUIRE_SHARED();
    const std::string q = offgrid::test::shared_dir() + "/golden/quant";
    if (!std::filesystem::exists(q + "/models")) GTEST_SKIP() << q << " is absent";
    size_t n = 0;
    for (const auto & e : std::filesystem::directory_iterator(q + "/models")) {
        SCOPED_TRACE(e.path().string());
        const CommandResult res = run(quoted(e.path().string()));
        ASSERT_EQ(res.status, 0) << res.err;
        std::map<std::string, std::string> shown;  // tensor name -> type column
        std::istringstream lines(res.out);
        std::string line;
        while (std::getline(lines, line)) {
            std::istringstream f(line);
            std::string index, name, type;
            if (f >> index >> name >> type && !index.empty() && std::isdigit(static_cast<unsigned char>(index[0]))) {
                shown[name] = type;
            }
        }
        std::ifstream fnv(q + "/dequant/" + e.path().stem().string() + ".fnv");
        std::string name, type, count, hash;
        while (fnv >> name >> type >> count >> hash) {
            ASSERT_TRUE(shown.count(name)) << name << " not listed";
            EXPECT_EQ(shown[name], type) << name;
            ++n;
        }
    }
    EXPECT_GT(n, 1000u);
}
