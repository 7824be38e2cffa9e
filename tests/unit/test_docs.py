"""The documentation agrees with the code: the generated pages (configuration, OpenAPI schema) are what
scripts/generate_docs.py makes from it today, and every relative link of README.md leads to a file.
(`mkdocs build --strict` in scripts/test.sh checks the links inside the site.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scripts import generate_docs

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("page", sorted(generate_docs.PAGES), ids=lambda page: page.name)
def test_generated_page_matches_the_code(page: Path) -> None:
    written = page.read_text() if page.exists() else ""
    assert written == generate_docs.PAGES[page](), (
        f"{page.relative_to(ROOT)} differs from what the code makes of it: run `{generate_docs.COMMAND}` "
        "and commit the result"
    )


def test_configuration_page_names_every_setting() -> None:
    page = generate_docs.configuration_markdown()
    for variable in ("BATON_DATABASE_URL", "BATON_AMQP_PREFETCH", "BATON_K8S_LEASE_NAME", "BATON_LEASE_SECONDS"):
        assert f"`{variable}`" in page
    assert "BATON_AMQP" not in page.split("## RabbitMQ")[0], "a group's variables belong in its own section"


def relative_links(markdown: str) -> list[str]:
    """Targets of [text](target) and ![alt](target) that are not URLs or anchors of the same page."""
    targets = re.findall(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", markdown)
    return [target for target in targets if not re.match(r"[a-z][a-z0-9+.-]*:|#", target)]


def test_every_relative_link_of_the_readme_resolves_to_a_file() -> None:
    links = relative_links((ROOT / "README.md").read_text())
    assert links, "the README links into the documentation"
    missing = [link for link in links if not (ROOT / link.split("#", 1)[0]).is_file()]
    assert not missing, f"README.md links to files that do not exist: {missing}"
