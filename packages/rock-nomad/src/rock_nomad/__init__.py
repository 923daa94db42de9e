"""Runtime for rock sandboxes on HashiCorp Nomad: one Nomad job per sandbox.

In progress (issue #12). What exists: :mod:`rock_nomad.testing`, the test support for the
runtime to come: a stand-in Nomad server that runs its tasks as real containers on the local
Docker engine, and the Nomad API contract suite run against it and against a real agent. The
runtime itself is not written yet: this distribution registers no plugin (no ``rock`` entry
point) and claims no capability.

Importing ``rock_nomad`` imports nothing of the ``testing`` extra.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
