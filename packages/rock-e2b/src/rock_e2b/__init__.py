"""E2B's API on rock's admin (see :mod:`rock_e2b.plugin`): E2B's unmodified SDK drives rock's
sandboxes through the control plane under ``/e2b`` and envd's data plane under ``/e2b/envd``."""

__version__ = "0.1.0"

__all__ = ["__version__"]
