// `offgrid tokenize`: shows how a model's tokenizer splits a text.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "command.h"
#include "offgrid/files.h"
#include "offgrid/error.h"
#include "offgrid/tokenizer.h"

namespace offgrid::cli {

namespace {

constexpr const char * kUsage =
    "usage: offgrid tokenize [-m MODEL] (-p TEXT | -f FILE) [--ids] [--no-special]\n"
    "\n"
    "Tokenises TEXT (or the bytes of FILE) with the tokenizer of MODEL (a GGUF file; without -m, the embedded\n"
    "default vocabulary) and prints one line per token: the id and the piece it stands for.\n"
    "\n"
    "  -m MODEL      GGUF file with tokenizer.ggml.* metadata\n"
    "  -p TEXT       text to tokenise\n"
    "  -f FILE       read the text from FILE\n"
    "  --ids         print only the ids, space-separated on one line\n"
    "  --no-special  treat control tokens written in the text (e.g. <|im_start|>) as plain text\n";

// Makes a piece printable on one line: quotes, backslashes and control bytes are escaped.
std::string escape_piece(const std::string & piece) {
    std::string out;
    for (const char ch : piece) {
        const auto c = static_cast<unsigned char>(ch);
        switch (c) {
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\\': out += "\\\\"; break;
            case '\'': out += "\\'"; break;
            default:
                if (c < 0x20 || c == 0x7F) {
                    static const char * hex = "0123456789abcdef";
                    out += "\\x";
                    out += hex[c >> 4];
                    out += hex[c & 15];
                } else {
                    out += ch;
                }
        }
    }
    return out;
}

// Regular files only (checked before opening, so a FIFO does not block); errors name the file.
std::string read_text_file(const std::string & path) { return read_file_text(path, "text file"); }

int usage_error(const std::string & message) {
    std::fprintf(stderr, "offgrid tokenize: %s (see offgrid tokenize --help)\n", message.c_str());
    return 2;
}

int run_tokenize(const std::vector<std::string> & args) {
    std::optional<std::string> model, text, file;
    bool ids_only = false;
    bool parse_special = true;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string & a = args[i];
        const auto value = [&]() -> std::optional<std::string> {
            if (i + 1 >= args.size()) return std::nullopt;
            return args[++i];
        };
        if (a == "-h" || a == "--help") {
            std::fputs(kUsage, stdout);
            return 0;
        } else if (a == "-m" || a == "--model") {
            if (!(model = value())) return usage_error(a + " needs a file name");
        } else if (a == "-p" || a == "--prompt") {
            if (!(text = value())) return usage_error(a + " needs a text");
        } else if (a == "-f" || a == "--file") {
            if (!(file = value())) return usage_error(a + " needs a file name");
        } else if (a == "--ids") {
            ids_only = true;
        } else if (a == "--no-special") {
            parse_special = false;
        } else {
            return usage_error("unknown argument '" + a + "'");
        }
    }
    if (text.has_value() == file.has_value()) return usage_error("give exactly one of -p TEXT and -f FILE");
    if (file) text = read_text_file(*file);

    // Without -m: the library's built-in byte-level vocabulary.
    const Tokenizer tokenizer = model ? Tokenizer::from_file(*model) : Tokenizer::byte_level();
    const std::vector<int32_t> ids = tokenizer.tokenize(*text, parse_special);
    if (ids_only) {
        std::string line;
        for (size_t i = 0; i < ids.size(); ++i) {
            if (i) line += ' ';
            line += std::to_string(ids[i]);
        }
        std::printf("%s\n", line.c_str());
    } else {
        for (const int32_t id : ids) {
            std::printf("%6d -> '%s'\n", id, escape_piece(tokenizer.token_to_piece(id)).c_str());
        }
    }
    return 0;
}

}  // namespace

OFFGRID_COMMAND("tokenize", "show the tokens of a text under a model's tokenizer", run_tokenize);

}  // namespace offgrid::cli
