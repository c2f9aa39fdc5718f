#!/usr/bin/env python3
"""Checks the manual's links (`make docs-check`): every relative link and `#anchor` in README.md,
docs/*.md and docs/bench/README.md must resolve.

- A link to a file must name a file that exists. From a page of the book (docs/), it must stay
  inside docs/ (the site has nothing else), and a linked page must be in docs/SUMMARY.md (mdBook
  renders only those).
- An anchor must be the slug of a heading of the target page, as mdBook and GitHub make it:
  the heading's text without its Markdown, lower-cased, spaces to `-`, every character but
  letters, digits, `-` and `_` dropped; a repeated heading gets `-1`, `-2`, ...
- Every page in docs/SUMMARY.md exists, and every .md under docs/ is in it.
- A repository path written as code (`crates/...`, `e2e/...`, `deploy/...`, `scripts/...`,
  `docs/...`, `.ci/...`) names a file or directory that exists.

Prints one line per problem (FILE:LINE: what) and exits 1 if there is any. Python 3 stdlib only.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\".*\")?\s*$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ID = re.compile(r"""<a\s+(?:name|id)=["']([^"']+)["']""")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
REPO_PATH = re.compile(r"^(?:crates|e2e|deploy|scripts|docs|\.ci)/[A-Za-z0-9._/-]*$")


def strip_code_spans(line):
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def lines_outside_fences(text):
    """(line number, line) of every line outside fenced code blocks."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif line.strip().startswith(fence):
                fence = None
            continue
        if fence is None:
            yield n, line


def heading_text(raw):
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)  # links and images: their text
    t = re.sub(r"<[^>]+>", "", t)  # inline HTML tags
    t = t.replace("`", "")
    t = re.sub(r"(\*\*|__|\*)", "", t)
    t = t.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return t.strip()


def slug(text):
    out = []
    for ch in text:
        if ch.isalnum() or ch in "_-":
            out.append(ch.lower())
        elif ch.isspace():
            out.append("-")
    return "".join(out)


_anchors = {}


def anchors_of(path):
    if path not in _anchors:
        seen = {}
        ids = set()
        text = open(path, encoding="utf-8").read()
        for _, line in lines_outside_fences(text):
            m = HEADING.match(line)
            if m:
                base = slug(heading_text(m.group(2)))
                k = seen.get(base, 0)
                seen[base] = k + 1
                ids.add(base if k == 0 else f"{base}-{k}")
            for a in HTML_ID.findall(line):
                ids.add(a)
        _anchors[path] = ids
    return _anchors[path]


def summary_pages():
    pages = []
    path = os.path.join(DOCS, "SUMMARY.md")
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        for target in re.findall(r"\]\(([^)]+)\)", line):
            pages.append((n, target))
    return pages


def main():
    problems = []

    def problem(path, n, what):
        problems.append(f"{os.path.relpath(path, ROOT)}:{n}: {what}")

    in_summary = set()
    for n, target in summary_pages():
        p = os.path.normpath(os.path.join(DOCS, target))
        if not os.path.isfile(p):
            problem(os.path.join(DOCS, "SUMMARY.md"), n, f"no such page: {target}")
        in_summary.add(p)
    for dirpath, _, names in os.walk(DOCS):
        for name in names:
            p = os.path.join(dirpath, name)
            if name.endswith(".md") and name != "SUMMARY.md" and p not in in_summary:
                problem(p, 1, "not in docs/SUMMARY.md, so not in the site: add it there")

    pages = [os.path.join(ROOT, "README.md"), os.path.join(DOCS, "bench", "README.md")]
    pages += sorted(os.path.join(DOCS, f) for f in os.listdir(DOCS) if f.endswith(".md"))
    checked = 0
    for page in pages:
        in_book = page.startswith(DOCS + os.sep)
        text = open(page, encoding="utf-8").read()
        for n, line in lines_outside_fences(text):
            for m in CODE_SPAN.finditer(line):
                token = m.group(2).strip()
                if REPO_PATH.match(token) and not os.path.exists(os.path.join(ROOT, token.rstrip("/"))):
                    problem(page, n, f"no such file or directory in the repository: {token}")
            bare = strip_code_spans(line)
            targets = INLINE_LINK.findall(bare)
            m = REF_DEF.match(bare)
            if m:
                targets.append(m.group(1))
            for target in targets:
                if not target or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
                    continue  # an absolute URL (https:, mailto:)
                checked += 1
                file_part, _, anchor = target.partition("#")
                dest = page if not file_part else os.path.normpath(os.path.join(os.path.dirname(page), file_part))
                if not os.path.exists(dest):
                    problem(page, n, f"broken link: {target} (no {os.path.relpath(dest, ROOT)})")
                    continue
                if in_book and not (dest == DOCS or dest.startswith(DOCS + os.sep)):
                    problem(page, n, f"link leaves docs/, so it breaks in the site: {target} (write the path as code)")
                    continue
                if in_book and dest.endswith(".md") and dest not in in_summary and dest != page:
                    problem(page, n, f"link to a page that is not in docs/SUMMARY.md: {target}")
                if anchor:
                    if not dest.endswith(".md"):
                        continue
                    if anchor not in anchors_of(dest):
                        problem(page, n, f"no heading for anchor #{anchor} in {os.path.relpath(dest, ROOT)}")
    for p in problems:
        print(p)
    print(f"check-doc-links: {len(pages)} pages, {checked} relative links, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
