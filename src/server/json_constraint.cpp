#include "server/json_constraint.h"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <stdexcept>

namespace offgrid::server {

namespace {

using ordered_json = nlohmann::ordered_json;

bool is_space(unsigned char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// The types a value starting with byte c can have (0: none).
uint8_t first_type(unsigned char c) {
    switch (c) {
        case '{': return JsonSchema::kObject;
        case '[': return JsonSchema::kArray;
        case '"': return JsonSchema::kString;
        case 't':
        case 'f': return JsonSchema::kBoolean;
        case 'n': return JsonSchema::kNull;
        case '-': return JsonSchema::kInteger | JsonSchema::kNumber;
        default: return is_digit(c) ? JsonSchema::kInteger | JsonSchema::kNumber : 0;
    }
}

bool numeric(const std::string & literal) { return !literal.empty() && first_type(static_cast<unsigned char>(literal[0])) & JsonSchema::kNumber; }

std::string compact(const ordered_json & j) { return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace); }

// Keywords that only annotate, or check values in ways the automaton does not enforce (see the header).
bool ignored_keyword(const std::string & k) {
    static const char * const kIgnored[] = {
        "title", "description", "default", "examples", "$schema", "$id", "$comment", "$defs", "definitions", "format",
        "pattern", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
        "uniqueItems", "deprecated", "readOnly", "writeOnly", "contentEncoding", "contentMediaType", "$anchor", "strict"};
    for (const char * i : kIgnored)
        if (k == i) return true;
    return false;
}

class Compiler {
public:
    // Adds to `into` (a new schema when null) the nodes of the document `root` (its $refs resolve in it).
    explicit Compiler(const ordered_json & root, std::shared_ptr<JsonSchema> into = nullptr) : root_(root), s_(std::move(into)) {
        if (!s_) {
            s_ = std::make_shared<JsonSchema>();
            s_->nodes.emplace_back();  // kAny
        }
    }
    int document(const std::string & where) { return compile(root_, where, 0); }
    std::shared_ptr<const JsonSchema> run() {
        s_->root = compile(root_, "schema", 0);
        check_root();
        return s_;
    }
private:
    void check_root() {
        bool completes = false;
        for (const unsigned char c : {'{', '[', '"', 't', 'f', 'n'}) completes = completes || s_->starts(s_->root, c, true);
        if (!completes) fail("schema", "the top-level value would be a bare number, which nothing could end");
    }

    [[noreturn]] static void fail(const std::string & at, const std::string & what) {
        throw std::invalid_argument(at + ": " + what);
    }

    int alloc() {
        if (s_->nodes.size() >= JsonSchema::kMaxNodes) fail("schema", "more than " + std::to_string(JsonSchema::kMaxNodes) + " nodes");
        s_->nodes.emplace_back();
        return static_cast<int>(s_->nodes.size() - 1);
    }
    JsonSchema::Node & at(int n) { return s_->nodes[static_cast<size_t>(n)]; }

    int ref(const std::string & path, const std::string & where, int depth) {
        if (auto it = refs_.find(path); it != refs_.end()) return it->second;
        const ordered_json * target = nullptr;
        if (path == "#") {
            target = &root_;
        } else {
            for (const char * base : {"#/$defs/", "#/definitions/"}) {
                const std::string b = base;
                if (path.compare(0, b.size(), b) != 0) continue;
                const std::string name = path.substr(b.size());
                const std::string defs = b.substr(2, b.size() - 3);
                if (root_.contains(defs) && root_[defs].is_object() && root_[defs].contains(name)) target = &root_[defs][name];
            }
        }
        if (!target) fail(where, "$ref '" + path + "' is not #, #/$defs/NAME or #/definitions/NAME of this schema");
        const int n = alloc();  // before compiling it, so a recursive reference finds it
        refs_[path] = n;
        const int body = compile(*target, where + "->" + path, depth + 1);
        s_->nodes[static_cast<size_t>(n)] = s_->nodes[static_cast<size_t>(body)];
        return n;
    }

    int compile(const ordered_json & j, const std::string & where, int depth) {
        if (depth > 64) fail(where, "nested more than 64 deep");
        if (j.is_boolean()) {
            if (!j.get<bool>()) fail(where, "the schema false allows nothing");
            return JsonSchema::kAny;
        }
        if (!j.is_object()) fail(where, "a schema must be an object");
        if (j.contains("$ref")) {
            if (!j["$ref"].is_string()) fail(where, "$ref must be a string");
            return ref(j["$ref"].get<std::string>(), where, depth);
        }
        for (auto it = j.begin(); it != j.end(); ++it) {
            const std::string & k = it.key();
            static const char * const kKnown[] = {"type", "enum", "const", "properties", "required", "additionalProperties",
                                                  "items", "minItems", "maxItems", "anyOf", "oneOf", "allOf", "nullable"};
            bool known = ignored_keyword(k);
            for (const char * n : kKnown) known = known || k == n;
            if (!known) fail(where, "the keyword '" + k + "' is not supported");
        }
        if (j.contains("allOf")) {
            const ordered_json & all = j["allOf"];
            if (!all.is_array() || all.size() != 1) fail(where, "allOf is supported with one schema only");
            return compile(all[0], where + ".allOf[0]", depth + 1);
        }
        for (const char * kw : {"anyOf", "oneOf"}) {
            if (!j.contains(kw)) continue;
            const ordered_json & alts = j[kw];
            if (!alts.is_array() || alts.empty()) fail(where, std::string(kw) + " must be a non-empty array");
            std::vector<int> flat;
            for (size_t i = 0; i < alts.size(); ++i) {
                const int a = compile(alts[i], where + "." + kw + "[" + std::to_string(i) + "]", depth + 1);
                if (!at(a).alternatives.empty()) flat.insert(flat.end(), at(a).alternatives.begin(), at(a).alternatives.end());
                else flat.push_back(a);
            }
            if (flat.size() == 1) return flat[0];
            for (int c = 0; c < 256; ++c) {
                int n = 0;
                for (const int a : flat) n += s_->starts(a, static_cast<unsigned char>(c), false) ? 1 : 0;
                if (n > 1) fail(where, std::string(kw) + " alternatives must start with different characters (two can start with '" +
                                           std::string(1, static_cast<char>(c)) + "')");
            }
            const int n = alloc();
            at(n).types = 0;
            at(n).alternatives = std::move(flat);
            return n;
        }
        const int n = alloc();
        if (j.contains("enum") || j.contains("const")) {
            std::vector<std::string> lits;
            if (j.contains("const")) lits.push_back(compact(j["const"]));
            if (j.contains("enum")) {
                if (!j["enum"].is_array() || j["enum"].empty()) fail(where, "enum must be a non-empty array");
                for (const auto & v : j["enum"]) lits.push_back(compact(v));
            }
            if (lits.size() > JsonSchema::kMaxLiterals) fail(where, "more than " + std::to_string(JsonSchema::kMaxLiterals) + " enum values");
            at(n).literals = std::move(lits);
            return n;
        }
        if (j.contains("type")) {
            uint8_t types = 0;
            auto add = [&](const ordered_json & t) {
                if (!t.is_string()) fail(where, "type must be a string or an array of strings");
                const std::string s = t.get<std::string>();
                if (s == "object") types |= JsonSchema::kObject;
                else if (s == "array") types |= JsonSchema::kArray;
                else if (s == "string") types |= JsonSchema::kString;
                else if (s == "integer") types |= JsonSchema::kInteger;
                else if (s == "number") types |= JsonSchema::kNumber;
                else if (s == "boolean") types |= JsonSchema::kBoolean;
                else if (s == "null") types |= JsonSchema::kNull;
                else fail(where, "unknown type '" + s + "'");
            };
            if (j["type"].is_array()) {
                for (const auto & t : j["type"]) add(t);
            } else {
                add(j["type"]);
            }
            if (types == 0) fail(where, "type allows nothing");
            at(n).types = types;
        }
        if (j.contains("nullable") && j["nullable"].is_boolean() && j["nullable"].get<bool>()) at(n).types |= JsonSchema::kNull;
        if (j.contains("properties")) {
            const ordered_json & props = j["properties"];
            if (!props.is_object()) fail(where, "properties must be an object");
            if (props.size() > JsonSchema::kMaxKeys) fail(where, "more than " + std::to_string(JsonSchema::kMaxKeys) + " properties");
            for (auto it = props.begin(); it != props.end(); ++it) {
                std::string key = compact(ordered_json(it.key()));
                key = key.substr(1, key.size() - 2);  // as written between the quotes
                const int child = compile(it.value(), where + ".properties." + it.key(), depth + 1);
                at(n).keys.push_back(std::move(key));
                at(n).key_nodes.push_back(child);
            }
        }
        if (j.contains("required")) {
            const ordered_json & req = j["required"];
            if (!req.is_array()) fail(where, "required must be an array");
            for (const auto & r : req) {
                if (!r.is_string()) fail(where, "required must hold strings");
                std::string key = compact(r);
                key = key.substr(1, key.size() - 2);
                size_t k = 0;
                while (k < at(n).keys.size() && at(n).keys[k] != key) ++k;
                if (k == at(n).keys.size()) fail(where, "required key '" + r.get<std::string>() + "' is not among the properties");
                at(n).required |= uint64_t{1} << k;
            }
        }
        if (j.contains("additionalProperties")) {
            const ordered_json & a = j["additionalProperties"];
            const int add = a.is_boolean() && !a.get<bool>() ? JsonSchema::kNone : compile(a, where + ".additionalProperties", depth + 1);
            at(n).additional = add;
        }
        if (j.contains("items")) {
            if (j["items"].is_array()) fail(where, "items as an array (tuples) is not supported");
            const int items = compile(j["items"], where + ".items", depth + 1);
            at(n).items = items;
        }
        for (const char * kw : {"minItems", "maxItems"}) {
            if (!j.contains(kw)) continue;
            if (!j[kw].is_number_unsigned() && !(j[kw].is_number_integer() && j[kw].get<int64_t>() >= 0)) {
                fail(where, std::string(kw) + " must be a non-negative integer");
            }
            const uint64_t v = std::min<uint64_t>(j[kw].get<uint64_t>(), UINT32_MAX);
            (std::string(kw) == "minItems" ? at(n).min_items : at(n).max_items) = static_cast<uint32_t>(v);
        }
        if (at(n).min_items > at(n).max_items) fail(where, "minItems is above maxItems");
        return n;
    }

    const ordered_json & root_;
    std::shared_ptr<JsonSchema> s_;
    std::map<std::string, int> refs_;
};

JsonSchema make_any(bool object) {
    JsonSchema s;
    s.nodes.emplace_back();
    if (object) {
        s.nodes.emplace_back();
        s.nodes[1].types = JsonSchema::kObject;
        s.root = 1;
    }
    return s;
}

}  // namespace

std::shared_ptr<const JsonSchema> JsonSchema::compile(const nlohmann::ordered_json & schema) { return Compiler(schema).run(); }

std::shared_ptr<const JsonSchema> JsonSchema::tool_call(const std::vector<std::string> & names,
                                                        const std::vector<const nlohmann::ordered_json *> & parameters) {
    if (names.empty() || names.size() > kMaxLiterals || parameters.size() != names.size()) {
        throw std::invalid_argument("tools: 1-64 functions, each with its parameters");
    }
    auto s = std::make_shared<JsonSchema>();
    s->nodes.emplace_back();  // kAny
    auto alloc = [&] {
        s->nodes.emplace_back();
        return static_cast<int>(s->nodes.size() - 1);
    };
    auto node = [&](int n) -> Node & { return s->nodes[static_cast<size_t>(n)]; };
    const int name = alloc();
    std::vector<int> args;
    for (size_t i = 0; i < names.size(); ++i) {
        node(name).literals.push_back(compact(ordered_json(names[i])));
        int a = -1;
        if (parameters[i]) {
            const size_t before = s->nodes.size();
            try {
                a = Compiler(*parameters[i], s).document("tools[" + std::to_string(i) + "].parameters");
            } catch (const std::invalid_argument &) {
                s->nodes.resize(before);  // what it added is unused: any object instead
                a = -1;
            }
        }
        if (a < 0) {
            a = alloc();
            node(a).types = kObject;
        }
        args.push_back(a);
    }
    const int call = alloc();
    Node & c = node(call);
    c.types = kObject;
    c.keys = {"name", "arguments"};
    c.key_nodes = {name, args[0]};
    c.required = 3;
    c.additional = kNone;
    c.ordered = true;
    c.switch_on = 0;
    c.switch_key = 1;
    c.switch_nodes = std::move(args);
    s->root = call;
    return s;
}

const JsonSchema & JsonSchema::any() {
    static const JsonSchema s = make_any(false);
    return s;
}

const JsonSchema & JsonSchema::any_object() {
    static const JsonSchema s = make_any(true);
    return s;
}

bool JsonSchema::starts(int n, unsigned char c, bool top) const {
    const Node & nd = nodes[static_cast<size_t>(n)];
    if (!nd.alternatives.empty()) {
        for (const int a : nd.alternatives)
            if (starts(a, c, top)) return true;
        return false;
    }
    if (!nd.literals.empty()) {
        for (const std::string & l : nd.literals)
            if (static_cast<unsigned char>(l[0]) == c && !(top && numeric(l))) return true;
        return false;
    }
    const uint8_t t = first_type(c);
    if (top && (t & kNumber)) return false;
    return (nd.types & t) != 0;
}

JsonPrefix::JsonPrefix(bool object_only)
    : schema_(object_only ? &JsonSchema::any_object() : &JsonSchema::any()), pending_(schema_->root) {}

JsonPrefix::JsonPrefix(const JsonSchema & schema) : schema_(&schema), pending_(schema.root) {}

JsonPrefix & JsonPrefix::operator=(const JsonPrefix & o) {
    if (this == &o) return *this;
    schema_ = o.schema_;
    depth_ = o.depth_;
    for (int i = 0; i < depth_; ++i) stack_[static_cast<size_t>(i)] = o.stack_[static_cast<size_t>(i)];
    mode_ = o.mode_;
    number_ = o.number_;
    pending_ = o.pending_;
    value_ = o.value_;
    prop_ = o.prop_;
    candidates_ = o.candidates_;
    pos_ = o.pos_;
    key_ = o.key_;
    hex_ = o.hex_;
    low_ = o.low_;
    high_ = o.high_;
    spaces_ = o.spaces_;
    digits_ = o.digits_;
    literal_ = o.literal_;
    return *this;
}

bool JsonPrefix::space(unsigned char c) {
    if (!is_space(c) || spaces_ >= kMaxSpaces) return false;
    ++spaces_;
    return true;
}

void JsonPrefix::close_value() {
    if (depth_ == 0) {
        mode_ = Mode::Done;
        return;
    }
    mode_ = stack_[static_cast<size_t>(depth_ - 1)].object ? Mode::ObjectNext : Mode::ArrayNext;
}

bool JsonPrefix::free_string() const {
    if (mode_ != Mode::String) return false;
    if (!key_) return true;
    return candidates_ == 0 && node(stack_[static_cast<size_t>(depth_ - 1)].node).additional != JsonSchema::kNone;
}

void JsonPrefix::enum_closes() {
    if (depth_ == 0) return;
    Frame & f = stack_[static_cast<size_t>(depth_ - 1)];
    if (!f.object || prop_ < 0 || node(f.node).switch_on != prop_) return;
    const std::vector<std::string> & lits = node(value_).literals;
    for (uint64_t m = candidates_; m; m &= m - 1) {
        const size_t k = static_cast<size_t>(__builtin_ctzll(m));
        if (lits[k].size() == pos_) f.choice = static_cast<int32_t>(k);
    }
}

bool JsonPrefix::number_allows_fraction() const { return (node(value_).types & JsonSchema::kNumber) != 0; }

bool JsonPrefix::more_keys(const Frame & f) const {
    const JsonSchema::Node & nd = node(f.node);
    const uint64_t all = nd.keys.size() == 64 ? ~uint64_t{0} : (uint64_t{1} << nd.keys.size()) - 1;
    return (all & ~f.seen) != 0 || nd.additional != JsonSchema::kNone;
}

bool JsonPrefix::key_start() {
    const Frame & f = stack_[static_cast<size_t>(depth_ - 1)];
    if (!more_keys(f)) return false;
    const JsonSchema::Node & nd = node(f.node);
    const uint64_t all = nd.keys.size() == 64 ? ~uint64_t{0} : (uint64_t{1} << nd.keys.size()) - 1;
    candidates_ = all & ~f.seen;
    if (nd.ordered) candidates_ &= ~candidates_ + 1;  // the first key not yet written
    pos_ = 0;
    key_ = true;
    mode_ = Mode::String;
    return true;
}

bool JsonPrefix::string_byte(unsigned char c) {
    if (!key_) return true;
    const JsonSchema::Node & nd = node(stack_[static_cast<size_t>(depth_ - 1)].node);
    uint64_t next = 0;
    for (uint64_t m = candidates_; m; m &= m - 1) {
        const size_t k = static_cast<size_t>(__builtin_ctzll(m));
        const std::string & key = nd.keys[k];
        if (key.size() > pos_ && static_cast<unsigned char>(key[pos_]) == c) next |= uint64_t{1} << k;
    }
    if (next == 0 && nd.additional == JsonSchema::kNone) return false;
    candidates_ = next;
    if (next != 0) ++pos_;
    return true;
}

bool JsonPrefix::key_end() {
    Frame & f = stack_[static_cast<size_t>(depth_ - 1)];
    const JsonSchema::Node & nd = node(f.node);
    prop_ = -1;
    for (uint64_t m = candidates_; m; m &= m - 1) {
        const size_t k = static_cast<size_t>(__builtin_ctzll(m));
        if (nd.keys[k].size() == pos_) prop_ = static_cast<int32_t>(k);
    }
    if (prop_ < 0 && nd.additional == JsonSchema::kNone) return false;
    if (prop_ >= 0) f.seen |= uint64_t{1} << prop_;
    key_ = false;
    mode_ = Mode::Colon;
    return true;
}

bool JsonPrefix::value_start(unsigned char c) {
    if (is_space(c)) return space(c);
    int32_t n = pending_;
    if (!node(n).alternatives.empty()) {
        int32_t pick = -1;
        for (const int a : node(n).alternatives) {
            if (schema_->starts(a, c, depth_ == 0)) {
                pick = a;
                break;
            }
        }
        if (pick < 0) return false;
        n = pick;
    }
    const JsonSchema::Node & nd = node(n);
    if (!nd.literals.empty()) {
        uint64_t cand = 0;
        for (size_t k = 0; k < nd.literals.size(); ++k) {
            const std::string & l = nd.literals[k];
            if (static_cast<unsigned char>(l[0]) == c && !(depth_ == 0 && numeric(l))) cand |= uint64_t{1} << k;
        }
        if (cand == 0) return false;
        spaces_ = 0;
        value_ = n;
        candidates_ = cand;
        pos_ = 1;
        mode_ = Mode::Enum;  // (no literal is one byte long but a number's, which ends at the byte after it)
        return true;
    }
    const uint8_t t = first_type(c);
    if (t == 0 || (nd.types & t) == 0) return false;
    if ((t & JsonSchema::kNumber) && depth_ == 0) return false;  // a bare number: nothing after it could end it
    spaces_ = 0;
    value_ = n;
    switch (c) {
        case '{':
        case '[':
            if (depth_ == kMaxDepth) return false;
            stack_[static_cast<size_t>(depth_++)] = Frame{0, 0, n, -1, c == '{'};
            mode_ = c == '{' ? Mode::ObjectFirst : Mode::ArrayFirst;
            return true;
        case '"':
            mode_ = Mode::String;
            key_ = false;
            return true;
        case '-':
            mode_ = Mode::Number;
            number_ = Num::Sign;
            digits_ = 0;
            return true;
        case 't': literal_ = "rue"; mode_ = Mode::Literal; return true;
        case 'f': literal_ = "alse"; mode_ = Mode::Literal; return true;
        case 'n': literal_ = "ull"; mode_ = Mode::Literal; return true;
        default:
            mode_ = Mode::Number;
            number_ = c == '0' ? Num::Zero : Num::Int;
            digits_ = 1;
            return true;
    }
}

bool JsonPrefix::after_value(unsigned char c) {
    close_value();
    return feed(c);
}

bool JsonPrefix::feed(unsigned char c) {
    switch (mode_) {
        case Mode::Value:
            return value_start(c);
        case Mode::ObjectFirst:
        case Mode::ObjectKey: {
            if (is_space(c)) return space(c);
            if (c == '"') {
                if (!key_start()) return false;
                spaces_ = 0;
                return true;
            }
            if (c == '}' && mode_ == Mode::ObjectFirst) {
                const Frame & f = stack_[static_cast<size_t>(depth_ - 1)];
                if (node(f.node).required != 0) return false;
                spaces_ = 0;
                --depth_;
                close_value();
                return true;
            }
            return false;
        }
        case Mode::Colon: {
            if (is_space(c)) return space(c);
            if (c != ':') return false;
            spaces_ = 0;
            const Frame & f = stack_[static_cast<size_t>(depth_ - 1)];
            const JsonSchema::Node & nd = node(f.node);
            if (prop_ >= 0 && prop_ == nd.switch_key && f.choice >= 0) {
                pending_ = nd.switch_nodes[static_cast<size_t>(f.choice)];
            } else {
                pending_ = prop_ >= 0 ? nd.key_nodes[static_cast<size_t>(prop_)] : nd.additional;
            }
            mode_ = Mode::Value;
            return true;
        }
        case Mode::ObjectNext:
        case Mode::ArrayNext: {
            if (is_space(c)) return space(c);
            Frame & f = stack_[static_cast<size_t>(depth_ - 1)];
            const JsonSchema::Node & nd = node(f.node);
            const bool object = mode_ == Mode::ObjectNext;
            if (c == ',') {
                if (object ? !more_keys(f) : f.count >= nd.max_items) return false;
                spaces_ = 0;
                if (object) {
                    mode_ = Mode::ObjectKey;
                } else {
                    ++f.count;
                    pending_ = nd.items;
                    mode_ = Mode::Value;
                }
                return true;
            }
            if (c == (object ? '}' : ']')) {
                if (object ? (nd.required & ~f.seen) != 0 : f.count < nd.min_items) return false;
                spaces_ = 0;
                --depth_;
                close_value();
                return true;
            }
            return false;
        }
        case Mode::ArrayFirst: {
            Frame & f = stack_[static_cast<size_t>(depth_ - 1)];
            const JsonSchema::Node & nd = node(f.node);
            if (c == ']') {
                if (nd.min_items > 0) return false;
                spaces_ = 0;
                --depth_;
                close_value();
                return true;
            }
            if (is_space(c)) return space(c);
            if (nd.max_items == 0) return false;
            pending_ = nd.items;
            f.count = 1;
            return value_start(c);
        }
        case Mode::String:
            if (c == '"') {
                if (key_) return key_end();
                close_value();
                return true;
            }
            if (c < 0x20 || !string_byte(c)) return false;
            if (c == '\\') mode_ = Mode::Escape;
            return true;
        case Mode::Escape:
            if (c == 'u') {
                if (!string_byte(c)) return false;
                mode_ = Mode::Unicode;
                hex_ = 4;
                high_ = false;
                return true;
            }
            if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
                if (!string_byte(c)) return false;
                mode_ = Mode::String;
                return true;
            }
            return false;
        case Mode::Unicode: {
            if (!is_hex(c)) return false;
            const int digit = 4 - hex_;  // 0..3
            const unsigned char u = static_cast<unsigned char>(c | 0x20);  // lower case
            if (digit == 0) {
                if (low_ && u != 'd') return false;
                high_ = u == 'd';  // maybe a surrogate: the next digit says
            } else if (digit == 1 && high_) {
                const bool high = u == '8' || u == '9' || u == 'a' || u == 'b';
                if (low_ ? !(u >= 'c' && u <= 'f') : !high && u >= 'c') return false;  // a low one only after a high one
                high_ = high;
            } else if (digit == 1) {
                high_ = false;
            }
            if (!string_byte(c)) return false;
            if (--hex_ > 0) return true;
            if (high_) {
                mode_ = Mode::LowBackslash;
            } else {
                mode_ = Mode::String;
                low_ = false;
            }
            return true;
        }
        case Mode::LowBackslash:
            if (c != '\\' || !string_byte(c)) return false;
            mode_ = Mode::LowU;
            return true;
        case Mode::LowU:
            if (c != 'u' || !string_byte(c)) return false;
            mode_ = Mode::Unicode;
            hex_ = 4;
            high_ = false;
            low_ = true;
            return true;
        case Mode::Literal:
            if (c != static_cast<unsigned char>(*literal_)) return false;
            if (*++literal_ == '\0') close_value();
            return true;
        case Mode::Enum: {
            const std::vector<std::string> & lits = node(value_).literals;
            uint64_t next = 0;
            bool complete = false;
            for (uint64_t m = candidates_; m; m &= m - 1) {
                const size_t k = static_cast<size_t>(__builtin_ctzll(m));
                if (lits[k].size() > pos_ && static_cast<unsigned char>(lits[k][pos_]) == c) next |= uint64_t{1} << k;
                complete = complete || lits[k].size() == pos_;
            }
            if (next == 0) {  // a number ends at the byte after it
                if (!complete) return false;
                enum_closes();
                return after_value(c);
            }
            candidates_ = next;
            ++pos_;
            for (uint64_t m = next; m; m &= m - 1) {
                const std::string & l = lits[static_cast<size_t>(__builtin_ctzll(m))];
                const char last = l.back();
                if (l.size() == pos_ && (last == '"' || last == '}' || last == ']' || last == 'e' || last == 'l')) {
                    enum_closes();
                    close_value();  // a value that ends itself
                    break;
                }
            }
            return true;
        }
        case Mode::Number:
            switch (number_) {
                case Num::Sign:
                    if (!is_digit(c)) return false;
                    number_ = c == '0' ? Num::Zero : Num::Int;
                    digits_ = 1;
                    return true;
                case Num::Zero:
                case Num::Int:
                    if (is_digit(c) && number_ == Num::Int) return ++digits_ <= kMaxDigits;
                    if (c == '.' && number_allows_fraction()) {
                        number_ = Num::Dot;
                        digits_ = 0;
                        return true;
                    }
                    if ((c == 'e' || c == 'E') && number_allows_fraction()) {
                        number_ = Num::E;
                        digits_ = 0;
                        return true;
                    }
                    return after_value(c);
                case Num::Dot:
                    if (!is_digit(c)) return false;
                    number_ = Num::Frac;
                    digits_ = 1;
                    return true;
                case Num::Frac:
                    if (is_digit(c)) return ++digits_ <= kMaxDigits;
                    if (c == 'e' || c == 'E') {
                        number_ = Num::E;
                        digits_ = 0;
                        return true;
                    }
                    return after_value(c);
                case Num::E:
                    if (c == '+' || c == '-') {
                        number_ = Num::ESign;
                        return true;
                    }
                    [[fallthrough]];
                case Num::ESign:
                    if (!is_digit(c)) return false;
                    number_ = Num::Exp;
                    digits_ = 1;
                    return true;
                case Num::Exp:
                    if (is_digit(c)) return ++digits_ <= kMaxExpDigits;
                    return after_value(c);
            }
            return false;
        case Mode::Done:
            return false;
    }
    return false;
}

TokenTexts::TokenTexts(const Tokenizer & tok) {
    const int32_t n = tok.n_vocab();
    text.resize(static_cast<size_t>(n));
    for (int32_t id = 0; id < n; ++id) {
        const TokenType type = tok.token_type(id);
        if (type == TokenType::Control || type == TokenType::Unused || tok.is_end_of_generation(id)) continue;
        text[static_cast<size_t>(id)] = tok.token_to_piece(id, false);
    }
    plain.resize(text.size());
    first.resize(text.size());
    for (size_t id = 0; id < text.size(); ++id) {
        const std::string & t = text[id];
        first[id] = t.empty() ? 0 : static_cast<uint8_t>(t[0]);
        plain[id] = !t.empty() && std::none_of(t.begin(), t.end(), [](char c) {
            return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
        });
    }
}

JsonConstraint::JsonConstraint(std::shared_ptr<const TokenTexts> texts, std::shared_ptr<const JsonSchema> schema,
                               bool object_only, std::string_view prefix, std::string suffix)
    : texts_(std::move(texts)),
      schema_(std::move(schema)),
      json_(schema_ ? JsonPrefix(*schema_) : JsonPrefix(object_only)),
      suffix_(std::move(suffix)) {
    json_.feed(prefix);  // the caller's own text: a prefix of an allowed value by construction
}

bool JsonConstraint::continues(std::string_view text) const {
    JsonPrefix j = json_;
    size_t m = matched_;
    for (size_t i = 0; i < text.size(); ++i) {
        if (!j.done()) {
            if (!j.feed(static_cast<unsigned char>(text[i]))) return false;
            continue;
        }
        if (m == suffix_.size() || text[i] != suffix_[m]) return false;
        ++m;
    }
    return true;
}

bool JsonConstraint::allowed(int32_t token) const {
    if (token < 0 || static_cast<size_t>(token) >= texts_->text.size()) return false;
    const std::string & t = texts_->text[static_cast<size_t>(token)];
    return !t.empty() && !complete() && continues(t);
}

size_t JsonConstraint::mask(float * logits, size_t n) const {
    const float off = -std::numeric_limits<float>::infinity();
    // Most tokens fail at their first byte: the bytes that may come next, tried once, turn those away without
    // running the automaton on them.
    std::array<bool, 256> first{};
    if (!complete()) {
        for (int c = 0; c < 256; ++c) {
            const char b = static_cast<char>(c);
            first[static_cast<size_t>(c)] = continues(std::string_view(&b, 1));
        }
    }
    // Inside a string that takes anything, a token without quote, backslash or control byte continues it.
    const bool free = !complete() && json_.free_string();
    const TokenTexts & tt = *texts_;
    size_t kept = 0;
    for (size_t id = 0; id < n; ++id) {
        bool ok = false;
        if (id < tt.text.size()) {
            if (free && tt.plain[id]) ok = true;
            else if (first[tt.first[id]] && !tt.text[id].empty()) ok = tt.text[id].size() == 1 || continues(tt.text[id]);
        }
        if (ok) ++kept;
        else logits[id] = off;
    }
    return kept;
}

void JsonConstraint::accept(int32_t token) {
    if (token < 0 || static_cast<size_t>(token) >= texts_->text.size()) return;
    for (const char c : texts_->text[static_cast<size_t>(token)]) {
        if (!json_.done()) {
            json_.feed(static_cast<unsigned char>(c));
        } else if (matched_ < suffix_.size()) {
            ++matched_;
        }
    }
}

}  // namespace offgrid::server
