"""The README stays a first read, and the docs hold together: every relative link resolves, every
page under docs/ is reachable from the README, and the two set-up commands are where CI looks."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 250

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def links(page: Path) -> list[str]:
    """The link targets of a markdown page, code blocks and inline code left out."""
    text = CODE.sub("", FENCE.sub("", page.read_text(encoding="utf-8")))
    return LINK.findall(text)


def local_target(page: Path, target: str) -> Path | None:
    """The file a relative link points at; None for web links, mail and in-page anchors."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
        return None
    path = target.split("#", 1)[0].split("?", 1)[0]
    if not path:
        return None
    return (page.parent / path).resolve()


def test_readme_is_a_first_read():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most 250)"


def test_readme_keeps_the_two_setup_commands():
    text = README.read_text(encoding="utf-8")
    assert "make demo" in text and "make test" in text


def test_there_are_docs_pages():
    assert sorted(DOCS.rglob("*.md")), "docs/ has no pages"


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = [t for t in links(page)
              if (path := local_target(page, t)) is not None and not path.exists()]
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_every_docs_page_is_reachable_from_the_readme():
    seen, todo = {README.resolve()}, [README.resolve()]
    while todo:
        page = todo.pop()
        for target in links(page):
            path = local_target(page, target)
            if path is not None and path.suffix == ".md" and path.exists() and path not in seen:
                seen.add(path)
                todo.append(path)
    orphans = [str(p.relative_to(ROOT)) for p in DOCS.rglob("*.md") if p.resolve() not in seen]
    assert not orphans, f"pages no link from README.md reaches: {sorted(orphans)}"


def test_link_finder_skips_code_and_web_links(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("[a](x.md) `[b](y.md)` [c](https://e.org/z.md) [d](#top)\n"
                    "```\n[e](w.md)\n```\n[f](sub/v.md#part)\n")
    found = [local_target(page, t) for t in links(page)]
    assert [p.name for p in found if p is not None] == ["x.md", "v.md"]
