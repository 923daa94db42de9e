"""The GEM runtime for images without GEM: a zip of gem-llm's games, prepared on the host.

When an env sandbox's image has no GEM (ROCK's plain ``python:3.11``), the provider uploads
this zip into the sandbox once (``/tmp/rock-gem``, unpacked by the rocklet) and the env worker
puts it on its ``PYTHONPATH``. The zip holds the wheels of ``runtime-requirements.txt`` for one
Python version and CPU, unpacked: pure Python plus numpy's and regex's extension modules.

Where it lives (:func:`runtime_dir`): ``[plugins.gem] runtime_dir``, else
``$ROCK_GEM_RUNTIME_DIR``, else ``share/rock-gem/runtime`` under the installation's prefix (the
virtualenv rock runs from). Never under a home directory: an admin run by another account (a
service account with its own ``HOME``) finds what the set-up prepared.

Prepared ahead by the set-up (``scripts/ensure-gem-image.sh`` runs ``python -m rock_gem.runtime
3.11``), which needs ``uv`` (``$ROCK_UV`` or on ``PATH``) or ``pip`` and the package index. An
engine never fetches it: a missing runtime is an error naming that command.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

__all__ = ["REQUIREMENTS", "RUNTIME_DIR_ENV", "prepare_command", "runtime_dir", "runtime_zip"]

#: The packages of the runtime, pinned.
REQUIREMENTS = Path(__file__).with_name("runtime-requirements.txt")
SUPPORTED = ("3.10", "3.11", "3.12")  # gem-llm 0.1.0: Requires-Python >=3.10, <=3.12


#: The variable naming the runtime's folder (when ``[plugins.gem] runtime_dir`` does not).
RUNTIME_DIR_ENV = "ROCK_GEM_RUNTIME_DIR"


def runtime_dir(configured: str | os.PathLike[str] | None = None) -> Path:
    """The folder of GEM's runtime zips: ``configured`` (``[plugins.gem] runtime_dir``), else
    ``$ROCK_GEM_RUNTIME_DIR``, else ``<sys.prefix>/share/rock-gem/runtime`` (the installation's,
    the same for every account that runs it; never ``~``)."""
    chosen = configured or os.environ.get(RUNTIME_DIR_ENV)
    if chosen:
        return Path(chosen).expanduser().absolute()
    return Path(sys.prefix) / "share" / "rock-gem" / "runtime"


def _legacy_dir() -> Path:
    """Where rock kept the zips before (the set-up user's cache): copied from, never read by an
    engine."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rock" / "gem-runtime"


def prepare_command(python: str, directory: Path | None = None) -> str:
    """The command that prepares the runtime for ``python`` in ``directory``."""
    command = f"{sys.executable} -m rock_gem.runtime {python}"
    if directory is not None and directory != runtime_dir(None):
        command += f" --dir {directory}"
    return command


def _arch() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def _name(python: str, arch: str) -> str:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    return f"gem-runtime-{digest}-py{python}-{arch}-v3"


def _fetch(site: Path, python: str, arch: str) -> None:
    uv = os.environ.get("ROCK_UV") or shutil.which("uv")
    if uv:
        command = [
            uv,
            "pip",
            "install",
            "--quiet",
            "--target",
            str(site),
            "--no-deps",
            "--only-binary",
            ":all:",
            "--python-version",
            python,
            "--python-platform",
            f"{arch}-manylinux_2_28",
            "-r",
            str(REQUIREMENTS),
        ]
    else:
        import importlib.util

        if importlib.util.find_spec("pip") is None:
            raise RuntimeError(
                f"cannot prepare GEM's runtime: {sys.executable} has no pip and no uv was found "
                "(set ROCK_UV to uv's path, or put uv on PATH)"
            )
        command = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--target",
            str(site),
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            python,
            "--implementation",
            "cp",
            "--platform",
            f"manylinux_2_28_{arch}",
            "--platform",
            f"manylinux2014_{arch}",
            "-r",
            str(REQUIREMENTS),
        ]
    try:
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=900)
    except FileNotFoundError as exc:
        raise RuntimeError(
            f"cannot prepare GEM's runtime: neither uv (ROCK_UV, PATH) nor pip is available ({exc})"
        ) from None
    except OSError as exc:
        raise RuntimeError(f"cannot prepare GEM's runtime: {exc}") from None
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(
            f"cannot prepare GEM's runtime for Python {python} ({arch}): {exc.stderr.strip()[-500:]}"
        ) from None


def runtime_zip(
    python: str,
    arch: str | None = None,
    *,
    fetch: bool = True,
    directory: str | os.PathLike[str] | None = None,
) -> Path:
    """The zip of GEM's runtime for ``python`` (``"3.11"``) on ``arch`` (default: this machine's),
    in ``directory`` (default :func:`runtime_dir`).

    :raises ValueError: a Python gem-llm does not support.
    :raises RuntimeError: not prepared and ``fetch`` is false (naming the command to run), or
        preparing failed.
    """
    if python not in SUPPORTED:
        raise ValueError(
            f"GEM (gem-llm 0.1.0) needs Python {', '.join(SUPPORTED)}; the image has Python {python}"
        )
    arch = arch or _arch()
    folder = runtime_dir(directory)
    target = folder / (_name(python, arch) + ".zip")
    if target.is_file():
        return target
    if not fetch:
        raise RuntimeError(
            f"GEM's runtime for Python {python} ({arch}) is not prepared in {folder}: run "
            f"`{prepare_command(python, folder)}` (the set-up, scripts/ensure-gem-image.sh, does)"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RuntimeError(
            f"cannot prepare GEM's runtime in {folder}: {exc} (choose a folder with --dir or "
            f"${RUNTIME_DIR_ENV}, and name it in [plugins.gem] runtime_dir)"
        ) from None
    legacy = _legacy_dir() / target.name
    if legacy.is_file():  # prepared by an earlier set-up in this user's cache
        partial = target.with_name(target.name + f".{os.getpid()}.tmp")
        shutil.copyfile(legacy, partial)
        os.replace(partial, target)
        return target
    work = target.with_name(target.stem + f".{os.getpid()}.tmp")
    shutil.rmtree(work, ignore_errors=True)
    site = work / "site"
    site.mkdir(parents=True)
    try:
        _fetch(site, python, arch)
        shutil.rmtree(site / "bin", ignore_errors=True)
        if "%d.%d" % sys.version_info[:2] == python:
            # Bytecode the sandbox's Python can use as it is (same version; unchecked hashes do
            # not depend on the files' times after unpacking): saves compiling numpy and GEM at
            # each sandbox's first env.
            import compileall
            import py_compile

            compileall.compile_dir(
                str(site), quiet=1, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
            )
        partial = work / "runtime.zip"
        # Stored, not deflated: the sandbox's rocklet unpacks it with zipfile, where inflating
        # ~90 MB cost 1.5 s; over the rocklet's socket the bytes themselves are cheap.
        with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_STORED) as zf:
            for path in sorted(site.rglob("*")):
                parts = set(path.relative_to(site).parts)
                if path.is_file() and "tests" not in parts:
                    zf.write(path, path.relative_to(site).as_posix())
        os.replace(partial, target)
        for old in target.parent.glob(f"gem-runtime-*-py{python}-{arch}*.zip"):
            if old != target:
                old.unlink(missing_ok=True)  # an older recipe's
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def main(argv: list[str] | None = None) -> int:
    """``python -m rock_gem.runtime [--dir DIR] [PYTHON_VERSION ...]``: prepare the zips
    (default 3.11) in ``DIR`` (default :func:`runtime_dir`)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m rock_gem.runtime", description="Prepare GEM's runtime zips."
    )
    parser.add_argument("--dir", default=None, help=f"default: {runtime_dir(None)}")
    parser.add_argument("python", nargs="*", default=["3.11"])
    args = parser.parse_args(argv)
    for python in args.python:
        try:
            print(runtime_zip(python, directory=args.dir))
        except (ValueError, RuntimeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
