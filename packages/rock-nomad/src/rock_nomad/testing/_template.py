"""The little of Nomad's template language the stand-in renders (Nomad renders consul-template,
a Go ``text/template`` with functions of its own; the stand-in knows only what a sandbox's job
needs, and fails the task on anything else rather than render it wrongly):

- literal text;
- ``{{ env "NAME" }}``: the task's environment;
- ``{{ with nomadVar "PATH" }} ... {{ .KEY }} ... {{ end }}``: a Nomad Variable's items
  (``PATH@NAMESPACE`` names another namespace); a variable that does not exist yet blocks the
  template until it does, as in Nomad;
- ``{{-`` and ``-}}`` trim the white space before and after them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

__all__ = ["TemplateError", "VariableMissing", "render"]

#: What Go's templates print for a missing key of a map.
NO_VALUE = "<no value>"
_ENV = re.compile(r'env\s+"([^"]+)"')
_WITH_VAR = re.compile(r'with\s+nomadVar\s+"([^"]+)"')
_FIELD = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)")


class TemplateError(Exception):
    """The template cannot be rendered (it fails the task)."""


class VariableMissing(Exception):
    """A variable the template reads does not exist (yet): the template waits for it."""

    def __init__(self, path: str, namespace: str) -> None:
        super().__init__(f"{path}@{namespace}")
        self.path = path
        self.namespace = namespace


def render(
    text: str,
    *,
    env: Mapping[str, str],
    variable: Callable[[str, str], Mapping[str, str] | None],
    namespace: str,
    left: str = "{{",
    right: str = "}}",
) -> str:
    """``text`` rendered.

    :param variable: ``(path, namespace) -> items``, or ``None`` when the variable does not
        exist; it raises :class:`TemplateError` when the task may not read it.
    :raises VariableMissing: a variable does not exist yet.
    :raises TemplateError: what the stand-in does not render, or a variable the task may not read.
    """
    action = re.compile(
        re.escape(left) + r"(?:(-)\s)?\s*(.*?)\s*(?:\s(-))?" + re.escape(right), re.S
    )
    out: list[str] = []
    scopes: list[Mapping[str, str] | None] = []  # each open ``with``'s items (None: skipped)
    pos = 0
    trim_next = False
    for match in action.finditer(text):
        literal = text[pos : match.start()]
        if trim_next:
            literal = literal.lstrip()
        if match.group(1):
            literal = literal.rstrip()
        skipping = any(scope is None for scope in scopes)
        if not skipping:
            out.append(literal)
        pos, trim_next = match.end(), bool(match.group(3))
        body = match.group(2).strip()
        if body == "end":
            if not scopes:
                raise TemplateError(f"unexpected {left} end {right}")
            scopes.pop()
            continue
        with_var = _WITH_VAR.fullmatch(body)
        if with_var:
            path, _, where = with_var.group(1).partition("@")
            items = None if skipping else _read(variable, path, where.split(".")[0] or namespace)
            scopes.append(items if items else None)
            continue
        if skipping:
            continue
        env_name = _ENV.fullmatch(body)
        field = _FIELD.fullmatch(body)
        if env_name:
            out.append(env.get(env_name.group(1), ""))
        elif field and scopes:
            out.append(str(scopes[-1].get(field.group(1), NO_VALUE)))  # type: ignore[union-attr]
        else:
            raise TemplateError(
                f'the stand-in renders only literal text, {left} env "NAME" {right} and '
                f'{left} with nomadVar "PATH" {right}...{left} .KEY {right}...{left} end {right}; not {left} {body} {right}'
            )
    if scopes:
        raise TemplateError(f"a {left} with {right} has no {left} end {right}")
    literal = text[pos:]
    out.append(literal.lstrip() if trim_next else literal)
    return "".join(out)


def _read(
    variable: Callable[[str, str], Mapping[str, str] | None], path: str, namespace: str
) -> Mapping[str, str]:
    items = variable(path, namespace)
    if items is None:
        raise VariableMissing(path, namespace)
    return items
