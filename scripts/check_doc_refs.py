#!/usr/bin/env python3
"""Every documentation reference in the code resolves.

Scans the sources (src/, app/, include/, tests/, bench/, python/, scripts/, examples/, cmake/) for
  - paths docs/<page>.md (and bare <page>.md names of pages under docs/),
  - a quoted section after a page name:  w4a16.md "Fused routing"  /  io.md 'Replay',
  - numbered sections:                   formats.md section 5 / sections 3-6,
and checks that the page exists and has a heading containing the quoted text (case-insensitive)
or a heading numbered N. Prints each unresolved reference with its file and line; exit 1 if any.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SCAN = ["src", "app", "include", "tests", "bench", "python", "scripts", "examples", "cmake"]
EXTS = {".cpp", ".hpp", ".cu", ".cuh", ".h", ".py", ".sh", ".txt", ".cmake", ".in"}

pages = {p.relative_to(DOCS).as_posix(): p for p in DOCS.rglob("*.md")}
by_name = {}
for rel, p in pages.items():
    by_name.setdefault(pathlib.PurePosixPath(rel).name, []).append(p)


def headings(p):
    return [l.lstrip("#").strip() for l in p.read_text().splitlines() if l.startswith("#")]


REF = re.compile(
    r"(?:docs/)?((?:[a-z0-9_]+/)*[a-z0-9_]+\.md)"
    r"(?:[,:]?\s*(?:\"([^\"]+)\"|'([^']+)'|sections?\s+(\d+)))?")
bad = []
for d in SCAN:
    base = ROOT / d
    if not base.exists():
        continue
    for f in base.rglob("*"):
        if f.suffix not in EXTS or not f.is_file() or f.name == "check_doc_refs.py":
            continue
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            for m in REF.finditer(line):
                name, q1, q2, num = m.group(1), m.group(2), m.group(3), m.group(4)
                full = m.group(0)
                if name.startswith("docs/"):
                    name = name[5:]
                explicit = full.startswith("docs/")
                if name in pages:
                    page = pages[name]
                elif pathlib.PurePosixPath(name).name in by_name and not explicit:
                    page = by_name[pathlib.PurePosixPath(name).name][0]
                elif explicit or name in ("formats.md", "performance.md", "architecture.md",
                                          "tuning.md"):
                    bad.append(f"{f.relative_to(ROOT)}:{n}: no page docs/{name}")
                    continue
                else:
                    continue  # some other .md (README.md, RESULTS.md, ...)
                quote = q1 or q2
                hs = headings(page)
                if quote and not any(quote.lower() in h.lower() for h in hs):
                    bad.append(f"{f.relative_to(ROOT)}:{n}: no heading \"{quote}\" in "
                               f"docs/{page.relative_to(DOCS).as_posix()}")
                if num and not any(re.match(rf"{num}[.\s]", h) for h in hs):
                    bad.append(f"{f.relative_to(ROOT)}:{n}: no section {num} in "
                               f"docs/{page.relative_to(DOCS).as_posix()}")
for b in bad:
    print(b)
print(f"check_doc_refs: {len(bad)} unresolved reference(s)")
sys.exit(1 if bad else 0)
