#!/usr/bin/env python3
"""Builds the training corpus as plain UTF-8 text from Debian packages.

  bible-kjv-text (+ the `bible` reader from bible-kjv): the King James Bible, public domain.
  python3.11-doc: the Python 3.11 documentation (PSF licence), HTML reduced to plain text.
  Debian manuals and fortunes (debian_prose.py): modern English prose, training split only.

Writes OUT/train.txt and OUT/heldout.txt. The held-out split is whole documents: a fixed list of Bible books
and every 20th documentation page (by sorted path), so no held-out sentence is ever seen in training.
No training line shares a run of 8 words with a licence of /usr/share/common-licenses or an evaluation text
(debian_prose.drop_overlaps); the counts of dropped lines are printed.
Documents are separated by a blank line; the tokenizer's end-of-text token is inserted by the trainer.
"""
import argparse
import html.parser
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import debian_prose  # noqa: E402

HELDOUT_BOOKS = {"Ruth", "Esther", "Jonah", "Haggai", "Philemon", "Jude", "Titus", "3 John"}
DOC_ROOT = "/usr/share/doc/python3.11/html"
# Pages of licence texts: never trained on (they stay in the page numbering, which fixes the held-out split).
LICENCE_PAGES = {"license.html"}
SKIP_DOC_DIRS = ("_static", "_images", "_downloads", "_sources", "genindex", "py-modindex", "search")


def bible_documents():
    """One document per book: the chapters' verses as paragraphs, verse numbers dropped."""
    out = subprocess.run(["bible", "-l100000", "Gen1:1-Rev22:21"], check=True, capture_output=True, text=True).stdout
    books, book, chapter = [], None, []
    header = re.compile(r"^(.+) (\d+)$")
    verse = re.compile(r"^\s+\d+ (.*)$")
    for line in out.splitlines():
        if not line.strip():
            continue
        m = verse.match(line)
        if m:
            chapter.append(m.group(1).strip())
            continue
        h = header.match(line.strip())
        if not h:
            raise SystemExit("bible: unexpected line: " + line)
        name = h.group(1)
        if book is None or book[0] != name:
            if book is not None:
                book[1].append(" ".join(chapter))
                books.append(book)
            book, chapter = (name, []), []
        elif chapter:
            book[1].append(" ".join(chapter))
            chapter = []
    book[1].append(" ".join(chapter))
    books.append(book)
    return [(name, "\n".join(ps)) for name, ps in books]


class _TextOf(html.parser.HTMLParser):
    """Visible text of the page body, with line breaks at block elements and navigation dropped."""
    BLOCK = {"p", "div", "section", "li", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "tr", "br",
             "table", "ul", "ol", "dl", "blockquote"}
    SKIP = {"script", "style", "head", "title"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts, self.skip, self.in_body, self.nav_depth, self.pre = [], 0, False, 0, 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in self.SKIP:
            self.skip += 1
        if tag == "div" and a.get("role") == "main":
            self.in_body = True
        cls = a.get("class") or ""
        if self.nav_depth or "headerlink" in cls or a.get("role") == "navigation" or "related" in cls.split():
            if tag in ("div", "a", "nav", "span"):
                self.nav_depth += 1
        if tag == "pre":
            self.pre += 1
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in self.SKIP and self.skip:
            self.skip -= 1
        if self.nav_depth and tag in ("div", "a", "nav", "span"):
            self.nav_depth -= 1
        if tag == "pre" and self.pre:
            self.pre -= 1
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data):
        if self.skip or not self.in_body or self.nav_depth:
            return
        self.parts.append(data if self.pre else re.sub(r"\s+", " ", data))


def html_to_text(raw):
    p = _TextOf()
    p.feed(raw)
    text = "".join(p.parts).replace("\u00b6", "")
    lines = [ln.rstrip() for ln in text.split("\n")]
    paras, cur = [], []
    for ln in lines:
        if ln.strip():
            cur.append(ln.strip() if not ln.startswith("    ") else ln)
        elif cur:
            paras.append("\n".join(cur))
            cur = []
    if cur:
        paras.append("\n".join(cur))
    return "\n".join(paras)


def doc_documents():
    pages = []
    for root, dirs, files in os.walk(DOC_ROOT):
        dirs[:] = sorted(d for d in dirs if not d.startswith(SKIP_DOC_DIRS))
        for f in sorted(files):
            if f.endswith(".html") and not f.startswith(SKIP_DOC_DIRS):
                pages.append(os.path.join(root, f))
    pages.sort()
    docs = []
    for path in pages:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = html_to_text(fh.read())
        if len(text) > 200:
            docs.append((os.path.relpath(path, DOC_ROOT), text))
    return docs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    train, held = [], []
    for name, text in bible_documents():
        (held if name in HELDOUT_BOOKS else train).append(text)
    for i, (name, text) in enumerate(doc_documents()):
        if i % 20 == 7:
            held.append(text)
        elif name not in LICENCE_PAGES:
            train.append(text)
    train += [text for _, text in debian_prose.documents()]
    forbidden = debian_prose.forbidden_shingles()
    dropped = 0
    for i, text in enumerate(train):
        train[i], n = debian_prose.drop_overlaps(text, forbidden)
        dropped += n
    train = [t for t in train if t.strip()]
    print(f"train.txt: {dropped} lines dropped for sharing an {debian_prose.SHINGLE}-word run with a licence or an "
          "evaluation text", file=sys.stderr)
    for fname, docs in (("train.txt", train), ("heldout.txt", held)):
        with open(os.path.join(args.out, fname), "w", encoding="utf-8") as fh:
            fh.write("\n\n".join(docs) + "\n")
        print(f"{fname}: {len(docs)} documents, {sum(map(len, docs))} characters", file=sys.stderr)


if __name__ == "__main__":
    main()
