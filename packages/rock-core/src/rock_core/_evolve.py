"""``evolve``: :func:`attrs.evolve` for the engine's hot path, at a fraction of its cost.

``attrs.evolve`` reads every field of the instance and calls the class's ``__init__`` with all
of them, so each converter and validator runs again on values that passed them when the instance
was made (a start evolves its record four or five times and its spec twice: about 20 us each).
:func:`evolve` copies the unchanged fields as they are and runs, for the changed ones only, what
``__init__`` would: the field's converter, then its validator, then the class's
``__attrs_post_init__`` (a check across fields), so a bad change is refused as by
``attrs.evolve``. Only for slotted attrs classes whose fields are all ``init`` and named as
their ``__init__`` arguments; any other class goes to ``attrs.evolve``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs

__all__ = ["evolve"]

T = TypeVar("T")


class _Plan:
    __slots__ = ("copy", "fields", "post_init", "set")

    def __init__(self, cls: type) -> None:
        fields = attrs.fields(cls)
        self.fields = {field.name: field for field in fields}
        #: Each field's slot setter, by name.
        self.set: dict[str, Callable[[object, object], None]] = {
            field.name: getattr(cls, field.name).__set__ for field in fields
        }
        namespace: dict[str, Any] = {f"_set_{name}": s for name, s in self.set.items()}
        body = "".join(f"    _set_{f.name}(new, old.{f.name})\n" for f in fields) or "    pass\n"
        exec(f"def copy(old, new):\n{body}", namespace)  # one line a field, no loop
        self.copy: Callable[[object, object], None] = namespace["copy"]
        self.post_init: Callable[[object], None] | None = getattr(cls, "__attrs_post_init__", None)


def _plan_of(cls: type) -> _Plan | None:
    """The plan of ``cls``, or ``None``: a class :func:`evolve` leaves to ``attrs.evolve``."""
    if cls in _plans:
        return _plans[cls]
    fields = attrs.fields(cls)
    fits = "__slots__" in cls.__dict__ and all(
        f.init and f.alias == f.name and not f.name.startswith("_") for f in fields
    )
    plan = _plans[cls] = _Plan(cls) if fits else None
    return plan


_plans: dict[type, _Plan | None] = {}


def evolve(inst: T, **changes: Any) -> T:
    """A copy of the attrs instance ``inst`` with ``changes``: what ``attrs.evolve`` returns
    (and raises), each changed value converted and checked, the rest taken as they are.

    :raises TypeError: a change names no field of the class.
    """
    cls = type(inst)
    plan = _plans[cls] if cls in _plans else _plan_of(cls)
    if plan is None:
        return attrs.evolve(inst, **changes)  # type: ignore[misc]
    new = object.__new__(cls)
    plan.copy(inst, new)
    fields = plan.fields
    checks = []
    for name, value in changes.items():
        field = fields.get(name)
        if field is None:
            raise TypeError(
                f"{cls.__name__}.__init__() got an unexpected keyword argument {name!r}"
            )
        converter = field.converter
        if isinstance(converter, attrs.Converter):
            args: list[Any] = [value]
            if converter.takes_self:  # type: ignore[attr-defined]
                args.append(new)
            if converter.takes_field:  # type: ignore[attr-defined]
                args.append(field)
            value = converter.converter(*args)  # type: ignore[attr-defined]
        elif converter is not None:
            value = converter(value)
        plan.set[name](new, value)
        if field.validator is not None:
            checks.append((field, value))
    if attrs.validators.get_disabled():
        checks = []
    for field, value in checks:  # as __init__: once every field is set
        assert field.validator is not None
        field.validator(new, field, value)
    if plan.post_init is not None:
        plan.post_init(new)
    return new
