"""Pin every dependency of the workspace, direct and indirect, in the root pyproject.toml.

`uv.lock` records the registry's download addresses, so it is not committed. Instead this script
resolves the workspace (`uv lock`), reads the exact versions from the generated uv.lock, and writes
them as names and versions only into `[tool.uv] constraint-dependencies` (and the build backend's
into `build-constraint-dependencies`). Two fresh machines then resolve to the same versions.

Run after changing any dependency:  python3 scripts/pin_constraints.py
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
BUILD_BACKEND = "hatchling"


def locked_versions() -> list[str]:
    subprocess.run(["uv", "lock", "--upgrade"], cwd=ROOT, check=True)
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    pins = set()
    for pkg in lock.get("package", []):
        source = pkg.get("source", {})
        if "registry" in source:  # skip the workspace's own packages
            pins.add(f"{pkg['name']}=={pkg['version']}")
    return sorted(pins)


def build_versions() -> list[str]:
    out = subprocess.run(
        ["uv", "pip", "compile", "--no-header", "--no-annotate", "-"],
        input=BUILD_BACKEND,
        text=True,
        capture_output=True,
        check=True,
        cwd=ROOT,
    ).stdout
    return sorted(line.strip() for line in out.splitlines() if "==" in line)


def replace_list(text: str, key: str, items: list[str]) -> str:
    body = "".join(f'    "{item}",\n' for item in items)
    pattern = re.compile(rf"^{key} = \[\n(?:.*\n)*?\]\n", re.M)
    if not pattern.search(text):
        sys.exit(f"{PYPROJECT}: no `{key} = [` list under [tool.uv]")
    return pattern.sub(f"{key} = [\n{body}]\n", text, count=1)


def main() -> None:
    text = PYPROJECT.read_text()
    # Resolve without the old pins so upgrades are possible, then write the new ones.
    text = replace_list(text, "constraint-dependencies", [])
    PYPROJECT.write_text(text)
    pins = locked_versions()
    text = replace_list(text, "constraint-dependencies", pins)
    text = replace_list(text, "build-constraint-dependencies", build_versions())
    PYPROJECT.write_text(text)
    subprocess.run(["uv", "lock"], cwd=ROOT, check=True)
    print(f"pinned {len(pins)} packages in {PYPROJECT.name}")


if __name__ == "__main__":
    main()
