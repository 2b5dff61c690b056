"""Modern English prose from Debian documentation packages, and the filter that keeps licence and evaluation
text out of the training split.

Every source here goes to the training split only; the held-out split stays the Bible books and Python pages of
build_corpus.py. Rendered text (the .txt.gz forms) is unwrapped: the lines of a prose paragraph are joined with
spaces, while short or ragged lines (tables of contents, code, lists) keep their breaks. A document never holds
a blank line, since blank lines separate documents in train.txt.
"""
import glob
import gzip
import html.parser
import os
import re

# (document name, path) of the rendered text of each manual; licences in tools/train/README.md.
TEXT_SOURCES = [
    ("debian-reference", "/usr/share/debian-reference/debian-reference.en.txt.gz"),
    ("developers-reference", "/usr/share/developers-reference/developers-reference.txt.gz"),
    ("debian-policy", "/usr/share/doc/debian-policy/policy.txt.gz"),
    ("maint-guide", "/usr/share/doc/maint-guide/maint-guide.en.txt.gz"),
    ("gnu-standards", "/usr/share/doc/gnu-standards/standards.text.gz"),
    ("gnu-maintain", "/usr/share/doc/gnu-standards/maintain.text.gz"),
    # doc-debian: the current constitution and social contract only (older versions repeat them)
    ("constitution", "/usr/share/doc/debian/constitution.txt.gz"),
    ("social-contract", "/usr/share/doc/debian/social-contract.txt.gz"),
    ("debian-manifesto", "/usr/share/doc/debian/debian-manifesto.gz"),
    ("bug-reporting", "/usr/share/doc/debian/bug-reporting.txt.gz"),
    ("bug-maint-info", "/usr/share/doc/debian/bug-maint-info.txt.gz"),
    ("mailing-lists", "/usr/share/doc/debian/mailing-lists.txt.gz"),
]
HANDBOOK = "/usr/share/doc/debian-handbook/html/en-US"
FORTUNES = "/usr/share/games/fortunes"
# Pictures, requests for translation and Perl one-liners are not prose.
FORTUNES_SKIP = {"art", "ascii-art", "translate-me", "perl"}
# Texts that must never be trained on: every licence Debian ships, and the evaluation texts.
LICENCES = "/usr/share/common-licenses"
EVAL_TEXTS = ["/usr/share/doc/debian/FAQ/debian-faq.en.txt.gz"]
SHINGLE = 8
# Licence boilerplate that differs from Debian's copies (other licences, other wrapping, numbered listings).
LICENCE_MARKERS = re.compile(r"merchantability|without (any )?warrant|permission is hereby granted|"
                             r"redistribution and use in source and binary forms|redistribute it and/or modify|"
                             r"public license for more details|at your option\) any later version|"
                             r"full text of the gnu", re.I)


def read_text(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        return fh.read()


def unwrap(text):
    """Paragraphs (blank-line separated) as single lines when they are wrapped prose."""
    out = []
    for para in re.split(r"\n\s*\n", text.expandtabs(8)):
        lines = [ln.rstrip() for ln in para.split("\n") if ln.strip()]
        if not lines:
            continue
        indents = {len(ln) - len(ln.lstrip()) for ln in lines[1:]}
        prose = len(lines) == 1 or (len(indents) == 1 and all(len(ln.strip()) >= 45 for ln in lines[:-1]))
        out.append(" ".join(ln.strip() for ln in lines) if prose else "\n".join(ln.strip() for ln in lines))
    return "\n".join(out)


class _HandbookText(html.parser.HTMLParser):
    """Body text of a publican (DocBook) page: paragraphs per block element, navigation and banner dropped."""
    BLOCK = {"p", "div", "li", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "pre", "tr", "br", "table", "td"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts, self.skip, self.pre = [], [], 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if self.skip:
            self.skip[-1][1] += tag == self.skip[-1][0]
        elif tag in ("head", "script", "style") or a.get("id") in ("banner", "title") or "docnav" in (a.get("class") or ""):
            self.skip.append([tag, 1])
        self.pre += tag == "pre"
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if self.skip and tag == self.skip[-1][0]:
            self.skip[-1][1] -= 1
            if not self.skip[-1][1]:
                self.skip.pop()
        if tag == "pre" and self.pre:
            self.pre -= 1
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data):
        if not self.skip:
            self.parts.append(data if self.pre else re.sub(r"\s+", " ", data))


def handbook_documents():
    docs = []
    for path in sorted(glob.glob(os.path.join(HANDBOOK, "*.html"))):
        p = _HandbookText()
        p.feed(read_text(path))
        lines = [ln.strip() if not ln.startswith("    ") else ln.rstrip() for ln in "".join(p.parts).split("\n")]
        text = "\n".join(ln for ln in lines if ln.strip())
        if len(text) > 200:
            docs.append(("debian-handbook/" + os.path.basename(path), text))
    return docs


def fortune_documents():
    docs = []
    for path in sorted(glob.glob(os.path.join(FORTUNES, "*"))):
        name = os.path.basename(path)
        if "." in name or name in FORTUNES_SKIP or not os.path.isfile(path):
            continue
        items = [f.strip("\n") for f in re.split(r"^%$", read_text(path), flags=re.M)]
        items = ["\n".join(ln.rstrip() for ln in f.split("\n") if ln.strip()) for f in items]
        docs.append(("fortunes/" + name, "\n".join(f for f in items if f)))
    return docs


def documents():
    """(name, text) of every Debian prose document, before filtering."""
    docs = [(name, unwrap(read_text(path))) for name, path in TEXT_SOURCES]
    return docs + handbook_documents() + fortune_documents()


def _words(text):
    return re.findall(r"[a-z0-9]+", text.lower())


def shingles(text, n=SHINGLE):
    w = _words(text)
    return {" ".join(w[i:i + n]) for i in range(len(w) - n + 1)}


def forbidden_shingles():
    """Every run of SHINGLE words of a licence in /usr/share/common-licenses or of an evaluation text."""
    out = set()
    for path in sorted(glob.glob(os.path.join(LICENCES, "*"))) + EVAL_TEXTS:
        if os.path.isfile(path):
            out |= shingles(read_text(path))
    return out


def drop_overlaps(text, forbidden):
    """The document without every line (paragraph) that holds a word of a SHINGLE-word run found in a forbidden
    text (runs may cross lines, so a licence notice wrapped into short lines goes too) or that matches
    LICENCE_MARKERS. Returns (text, lines dropped).
    """
    lines = text.split("\n")
    words, owner = [], []
    for i, ln in enumerate(lines):
        w = _words(ln)
        words += w
        owner += [i] * len(w)
    bad = {i for i, ln in enumerate(lines) if LICENCE_MARKERS.search(ln)}
    for k in range(len(words) - SHINGLE + 1):
        if " ".join(words[k:k + SHINGLE]) in forbidden:
            bad.update(owner[k:k + SHINGLE])
    return "\n".join(ln for i, ln in enumerate(lines) if i not in bad), len(bad)
