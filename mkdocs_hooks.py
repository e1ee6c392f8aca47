"""mkdocs hooks: the site's home page is README.md, its links made the site's own.

README.md links into ``docs/`` from the repository's root; on the site those pages sit
at the root. Links to files outside ``docs/`` (an example script) become their path in
code. So the home page is never a second copy of the README to keep in step.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

README = Path(__file__).parent / "README.md"
_RELATIVE_LINK = re.compile(r"(!?)\[([^\]]+)\]\((?!https?:|#)([^)]+)\)")


def site_markdown(readme: str) -> str:
    """README.md's markdown with links into ``docs/`` relative to the site's root."""

    def relink(match: re.Match[str]) -> str:
        image, text, target = match.groups()
        if target.startswith("docs/"):
            return f"{image}[{text}]({target.removeprefix('docs/')})"
        return f"`{target}`"  # a file of the repository, not of the site

    return _RELATIVE_LINK.sub(relink, readme)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri == "index.md":
        return site_markdown(README.read_text(encoding="utf-8"))
    return markdown
