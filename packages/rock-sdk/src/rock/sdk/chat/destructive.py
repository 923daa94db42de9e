"""Which shell commands delete, stop or overwrite beyond repair: the chat runs such a command only
with ``confirm=True``."""

from __future__ import annotations

import posixpath
import re

__all__ = ["is_destructive_command"]

# Programs that delete, stop or overwrite beyond repair: a command running one (as a command, not
# as an argument: "echo rm" is harmless) runs only with confirm=True.
_DESTRUCTIVE_PROGRAMS = frozenset(
    {
        "rm",
        "rmdir",
        "unlink",
        "shred",
        "wipefs",
        "kill",
        "killall",
        "pkill",
        "reboot",
        "shutdown",
        "halt",
        "poweroff",
        "truncate",
        "mkfs",
    }
)
_SEPARATORS = re.compile(r"\|\||&&|[;&|(){}`\n]|\$\(")
_PREFIXES = frozenset(
    {
        "sudo",
        "env",
        "nohup",
        "time",
        "exec",
        "command",
        "builtin",
        "xargs",
        "nice",
        "timeout",
        "then",
        "do",
        "else",
    }
)
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _destructive_form(w: list[str]) -> bool:
    program, args = w[0], w[1:]
    if program == "dd":
        return any(x.startswith("of=") for x in args)
    if program == "find":
        return any(x in ("-delete", "-exec", "-execdir") for x in args)
    if program == "git":
        return args[:2] == ["reset", "--hard"] or (
            args[:1] == ["clean"] and any(x.startswith("-") and "f" in x for x in args)
        )
    if program in ("apt-get", "apt", "pip", "pip3", "dpkg"):
        return bool(args) and args[0] in ("remove", "purge", "uninstall", "autoremove", "-r", "-P")
    if program == "uv":
        return args[:2] == ["pip", "uninstall"]
    return program == "mv"


def is_destructive_command(command: str) -> bool:
    """Whether a shell command deletes, stops or overwrites something: a simple command whose
    program is ``rm``, ``kill``, ``shutdown``, ``mkfs.*`` ..., or ``dd of=``, ``find -delete``,
    ``git reset --hard``, ``git clean -f``, a package removal, ``mv``, a write to a disk device.
    The chat runs such a command only with ``confirm=True``. It errs on the safe side: the text
    is split at ``;``, ``&&``, ``|``, ... even inside quotes, so ``echo 'a; rm b'`` counts."""
    for part in _SEPARATORS.split(command):
        if re.search(r">\s*/dev/(sd|nvme|vd|xvd|hd|disk)", part):
            return True
        words = part.split()
        while words and (
            words[0] in _PREFIXES or _ASSIGNMENT.match(words[0]) or words[0].startswith("-")
        ):
            words = words[1:]
        if not words:
            continue
        words[0] = posixpath.basename(words[0].strip("'\""))
        if words[0].split(".")[0] in _DESTRUCTIVE_PROGRAMS or _destructive_form(words):
            return True
    return False
