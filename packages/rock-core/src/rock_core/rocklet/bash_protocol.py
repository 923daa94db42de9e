"""The text a session exchanges with its bash: what rock types, and the marks it reads back.

No I/O here (see :mod:`.bash_session` for the design, :mod:`.pty_shell` for the terminal):

* :class:`ShellMarks`: a session's random nonce and the marks made from it: the prompt
  ``__ROCK_PS1_<nonce>_<status>__``, the begin mark of each command, the syntax error frame and
  the shell's pid; the setup script typed once, and the trigger line typed for every command.
* :class:`Expect`: one ``expect`` string, found as text or as a regular expression.
* :func:`clean_output`, :func:`observation`, :func:`syntax_error`: what the reads become in
  ROCK's answers and errors.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start; annotations are strings anyway
    from collections.abc import Sequence
    from typing import Any

from .errors import BashIncorrectSyntaxError

__all__ = [
    "ShellMarks",
    "Expect",
    "bootstrap_line",
    "needs_bash_n",
    "clean_output",
    "observation",
    "quote",
    "syntax_error",
]

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# A "}" that stands as a word could close the function body used for the in-shell syntax check.
_BRACE_WORD = re.compile(r"(?:^|[\s;&|()])\}(?=$|[\s;&|()<>])")


def quote(text: str) -> str:
    """Single-quote ``text`` for bash."""
    return "'" + text.replace("'", "'\\''") + "'"


def clean_output(data: bytes) -> str:
    """Session output as ROCK returns it: decoded, ANSI escapes removed, stripped."""
    text = data.decode("utf-8", "backslashreplace")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return text.strip()


def bootstrap_line(cmd_path: str) -> bytes:
    """The first line typed into a new shell: read the setup script from ``cmd_path``, run it."""
    return (
        '__rock_cf=%s; IFS= read -r -d \'\' __rock_c <"$__rock_cf" || :; eval "$__rock_c"\n'
        % quote(cmd_path)
    ).encode("utf-8")


def needs_bash_n(command: str) -> bool:
    """Whether ``command`` must be checked by a real ``bash -n`` (a ``}`` standing as a word
    could close the function body the in-shell check wraps it in)."""
    return bool(_BRACE_WORD.search(command))


class ShellMarks:
    """The marks of one session, made from a random nonce so a command's output cannot forge
    them."""

    __slots__ = ("prompt", "syntax_start", "syntax_end", "pid_mark", "begin_mark")

    def __init__(self, nonce: str) -> None:
        self.prompt = ("__ROCK_PS1_%s_" % nonce).encode("ascii")
        self.syntax_start = ("__ROCK_SYNTAX_%s_" % nonce).encode("ascii")
        self.syntax_end = ("__ROCK_SYNTAX_END_%s__" % nonce).encode("ascii")
        self.pid_mark = ("__ROCK_PID_%s_" % nonce).encode("ascii")
        self.begin_mark = "__ROCK_BEGIN_%s_" % nonce

    def setup_script(self, err_path: str, startup_source: Sequence[str]) -> bytes:
        """The script run once at start: the prompt, the in-shell syntax check (its errors go
        to ``err_path``), ``startup_source``, then the shell's pid and the first prompt."""
        lines = [
            "unset PROMPT_COMMAND",
            "PS2=''; PS0=''",
            "set +H +o history; unset HISTFILE",
            "__rock_x=",
            "__rock_e=" + quote(err_path),
            "__rock_ps1=" + quote(self.prompt.decode() + "${__rock_x:-$?}__"),
            "__rock_chk() {",
            "  local __rock_a=0 __rock_m=",
            "  if shopt -q expand_aliases; then __rock_a=1; shopt -u expand_aliases; fi",
            '  if eval "__rock_f() { : ; $__rock_c',
            "",
            '}" 2>|"$__rock_e"; then',
            "    unset -f __rock_f",
            '    if [ "$__rock_a" = 1 ]; then shopt -s expand_aliases; fi',
            "    return 0",
            "  fi",
            '  if [ "$__rock_a" = 1 ]; then shopt -s expand_aliases; fi',
            "  IFS= read -r -d '' __rock_m <\"$__rock_e\" || :",
            "  printf '%%s%%s%%s' %s \"$__rock_m\" %s"
            % (quote(self.syntax_start.decode()), quote(self.syntax_end.decode())),
            "  return 1",
            "}",
        ]
        # ROCK sources each file as written (no quoting), so "~/.bashrc" and "$VAR" work.
        lines += ["source " + path for path in startup_source]
        lines += [
            "printf '%%s%%d__' %s \"$$\"" % quote(self.pid_mark.decode()),
            "__rock_x=; PS1=$__rock_ps1",
        ]
        return ("\n".join(lines) + "\n").encode("utf-8")

    def trigger(self, seq: int, checked: bool) -> tuple[bytes, bytes]:
        """The line typed for command number ``seq`` (its text already in the command file) and
        its begin mark. ``checked``: the shell checks the syntax before it runs the text."""
        check = 'if __rock_chk; then eval "$__rock_c"; fi' if checked else 'eval "$__rock_c"'
        begin = "%s%d__" % (self.begin_mark, seq)
        line = (
            "__rock_x=; printf %%s %s; IFS= read -r -d '' __rock_c <\"$__rock_cf\" || :; %s; "
            "__rock_x=$?; PS1=$__rock_ps1; PS2=; PS0=\n" % (begin, check)
        )
        return line.encode("ascii"), begin.encode("ascii")

    def take_shell_pid(self, data: bytearray) -> int:
        """The shell's pid printed at the end of the setup script (0 if not found); the mark is
        taken out of ``data``."""
        pid = 0
        i = data.rfind(self.pid_mark)
        if i != -1:
            j = data.find(b"__", i + len(self.pid_mark))
            try:
                pid = int(data[i + len(self.pid_mark) : j])
            except ValueError:
                pass
            del data[i : j + 2]
        return pid

    def raise_syntax_error(self, data: bytearray, command: str) -> None:
        """Raise :class:`BashIncorrectSyntaxError` if the in-shell check reported one."""
        i = data.find(self.syntax_start)
        if i == -1:
            return
        j = data.find(self.syntax_end, i)
        stderr = bytes(data[i + len(self.syntax_start) : j if j != -1 else len(data)]).decode(
            "utf-8", "backslashreplace"
        )
        raise syntax_error(command, 2, "", stderr.replace("__rock_f", "command"))

    def find_prompt(self, buf: bytearray, scan: int) -> Any:
        """The first complete prompt in ``buf`` from ``scan`` as ``(start, end, code)``, or
        where to scan next when there is none yet."""
        mark = self.prompt
        i = buf.find(mark, scan)
        while i != -1:
            j = i + len(mark)
            k = j
            n = len(buf)
            while k < n and 48 <= buf[k] <= 57:
                k += 1
            if k + 2 > n:
                return i  # incomplete, wait for more
            if k > j and buf[k : k + 2] == b"__":
                return (i, k + 2, int(buf[j:k]))
            i = buf.find(mark, i + 1)
        return max(scan, len(buf) - len(mark) - 24)

    def drop_prompts(self, data: bytearray) -> bytearray:
        """``data`` without its complete prompts."""
        scan = 0
        while True:
            found = self.find_prompt(data, scan)
            if isinstance(found, int):
                return data
            del data[found[0] : found[1]]
            scan = found[0]


class Expect:
    """One ``expect`` entry: found as literal text, or else as a regular expression."""

    __slots__ = ("text", "literal", "regex")

    def __init__(self, text: str) -> None:
        self.text = text
        self.literal = text.encode("utf-8")
        try:
            self.regex: Any | None = re.compile(self.literal)
        except re.error:
            self.regex = None

    def search(self, buf: bytearray, start: int) -> tuple[int, int] | None:
        """The earliest ``(start, end)`` match at or after ``start``."""
        best = None
        if self.literal:
            i = buf.find(self.literal, max(0, start - len(self.literal) + 1))
            if i != -1:
                best = (i, i + len(self.literal))
        if self.regex is not None:
            m = self.regex.search(buf, max(0, start - 4096))
            if m is not None and m.end() > m.start() and (best is None or m.start() < best[0]):
                best = (m.start(), m.end())
        return best


def observation(output: str, exit_code: int | None, expect_string: str) -> dict[str, Any]:
    """ROCK's ``BashObservation``."""
    return {
        "session_type": "bash",
        "output": output,
        "exit_code": exit_code,
        "failure_reason": "",
        "expect_string": expect_string,
    }


def syntax_error(command: str, code: int, stdout: str, stderr: str) -> BashIncorrectSyntaxError:
    """ROCK's error for a command bash cannot parse."""
    msg = (
        "Error (exit code %d) while checking bash command \n%r\n---- Stderr ----\n%s\n---- Stdout ----\n%s"
        % (
            code,
            command,
            stderr,
            stdout,
        )
    )
    return BashIncorrectSyntaxError(msg, extra_info={"bash_stdout": stdout, "bash_stderr": stderr})
