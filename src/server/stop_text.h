// Incremental text of a generation with stop strings: pieces go in as tokens are sampled, text that can safely be
// shown comes out. A stop string is honoured across token boundaries and never emitted: any tail of the pending
// text that could still grow into a stop string is held back, and so are the bytes of an unfinished UTF-8
// character. Invariant: the concatenation of everything emitted never contains a stop string, and is a prefix
// of the generated text cut at its first stop string.
#pragma once

#include <string>
#include <vector>

namespace offgrid::server {

class StopText {
public:
    explicit StopText(std::vector<std::string> stops);

    // Adds a piece; returns the text that became safe to emit (possibly empty). After a stop string is found the
    // text before it is returned and stopped() is true; later pieces are ignored.
    std::string push(const std::string & piece);
    // The end of the generation (length, end of text): returns what was held back (a partial stop string is
    // plain text once nothing can follow it).
    std::string flush();
    bool stopped() const { return stopped_; }

private:
    std::vector<std::string> stops_;
    std::string pending_;
    bool stopped_ = false;
};

}  // namespace offgrid::server
