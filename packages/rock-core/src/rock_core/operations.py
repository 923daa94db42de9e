"""The catalog of operations on a sandbox: each declared once, every surface following it.

An :class:`Operation` names an operation's request and response models, its rocklet route,
its admin route (under ``/apis/envs/sandbox/v1``), whether it counts as the sandbox's activity,
and how it travels (:data:`~rock_core.actions._operation.KINDS`). Each is declared next to its
models in the :mod:`rock_core.actions` module of its job (``EXECUTE`` in ``commands``,
``READ_FILE`` in ``files``, ...); :data:`OPERATIONS` gathers them, in declaration order.

The surfaces that follow the catalog:

- the admin mounts a route for each (:func:`rock.admin.operations.operation_routes`); those of
  kind ``call`` share one handler, which sends the request on to the rocklet;
- :meth:`RockletClient.call <rock_core.rocklet_client.RockletClient.call>` sends any ``call``
  operation to a rocklet (with the answer's cap and error translation of every call);
- both SDK drivers answer any ``call`` operation through one method, ``call(sandbox_id, op,
  request)``;
- the rocklet serves each route (``rock_core/rocklet/api.py``'s table, or a handler a module
  declares in its ``ROUTES``, as ``rock_core/rocklet/files.py`` does);
- :class:`~rock.sdk.sandbox.client.Sandbox` has a method for each (ROCK's signatures, written
  by hand).

``packages/rock-sdk/tests/test_operations_catalog.py`` walks the catalog and fails for a
surface that lacks an operation or disagrees on its fields.
"""

from __future__ import annotations

from types import ModuleType

from rock_core.actions import commands, files, sandboxes, sessions
from rock_core.actions._operation import KINDS, Operation

__all__ = ["KINDS", "OPERATIONS", "Operation", "operation"]


def _gather(*modules: ModuleType) -> tuple[Operation, ...]:  # type: ignore[type-arg]
    found: dict[str, Operation] = {}  # type: ignore[type-arg]
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, Operation):
                other = found.setdefault(value.name, value)
                if other is not value:
                    raise RuntimeError(f"two operations are named {value.name!r}")
    return tuple(found.values())


#: Every operation on a sandbox, in declaration order.
OPERATIONS = _gather(commands, sessions, files, sandboxes)

_BY_NAME = {op.name: op for op in OPERATIONS}


def operation(name: str) -> Operation:  # type: ignore[type-arg]
    """The operation called ``name``.

    :raises KeyError: no such operation.
    """
    return _BY_NAME[name]
