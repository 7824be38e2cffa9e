"""Print the mirror apt already uses for Debian's main archive of a suite (bookworm by default), from
deb822 `.sources` files or one-line `.list` files; deb.debian.org when none is configured.

Used by scripts/containers.sh and tests/system/test_debian_package.py, which debootstrap from it:
`python3 scripts/debian_mirror.py [SUITE]`. Standard library only (it runs with any python3).
"""

from __future__ import annotations

import glob
import re
import sys

DEFAULT_MIRROR = "http://deb.debian.org/debian"


def configured_mirrors(suite: str) -> list[str]:
    found: list[str] = []
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        with open(path) as sources:
            stanzas = re.split(r"\n\s*\n", sources.read())
        for stanza in stanzas:
            fields = dict(re.findall(r"^(\w[\w-]*):\s*(.+)$", stanza, re.M))
            types = fields.get("Types", "deb").split()
            if suite in fields.get("Suites", "").split() and types and types[0] == "deb":
                found += fields.get("URIs", "").split()
    for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
        try:
            with open(path) as listing:
                lines = listing.read().splitlines()
        except OSError:
            continue
        for line in lines:
            parts = [part for part in line.split("#", 1)[0].split() if not part.startswith("[")]
            if len(parts) >= 3 and parts[0] == "deb" and parts[2] == suite:
                found.append(parts[1])
    return found


def mirror(suite: str = "bookworm") -> str:
    return next(iter(configured_mirrors(suite)), DEFAULT_MIRROR)


if __name__ == "__main__":
    print(mirror(sys.argv[1] if len(sys.argv) > 1 else "bookworm"))
