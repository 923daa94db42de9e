"""Runtime for rock sandboxes on HashiCorp Nomad: one Nomad job per sandbox.

- :class:`rock_nomad.runtime.NomadRuntime`, registered as the ``nomad`` runtime through the
  ``rock`` entry point (``[engine] runtime = "nomad"``, settings in ``[plugins.nomad]``);
- :mod:`rock_nomad.testing` (the ``testing`` extra): a stand-in Nomad server that runs its tasks
  as real containers on the local Docker engine, and the Nomad API contract suite.

Importing ``rock_nomad`` imports nothing of the ``testing`` extra.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
