"""What the repository itself must hold to: no large binaries tracked (wheels, archives: packages come
from their registries), and tests that never import the benchmarks (what both need lives in harness/)."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LARGEST_BYTES = 1024 * 1024
# Generated documentation data may grow past the limit (docs/benchmarks.json holds every measurement).
DOCUMENTATION_DATA = ("docs/",)


def tracked_files() -> list[str]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=30)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"not a git checkout: {exc}")
    return [name for name in listed.stdout.decode().split("\0") if name]


def test_no_large_file_is_tracked_but_documentation_data() -> None:
    large = [
        name
        for name in tracked_files()
        if not name.startswith(DOCUMENTATION_DATA)
        and (ROOT / name).is_file()
        and (ROOT / name).stat().st_size > LARGEST_BYTES
    ]
    assert not large, f"tracked files over {LARGEST_BYTES} bytes (take them from a registry instead): {large}"


def test_no_binary_package_is_tracked() -> None:
    packages = [name for name in tracked_files() if name.endswith((".whl", ".tar.gz", ".zip", ".deb", ".egg"))]
    assert not packages, f"tracked packages: {packages}"


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_no_test_imports_the_benchmarks() -> None:
    importing = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("*.py")
        if any(name == "bench" or name.startswith("bench.") for name in imported_modules(path))
    )
    assert not importing, f"tests importing bench/ (move what they share to harness/): {importing}"
