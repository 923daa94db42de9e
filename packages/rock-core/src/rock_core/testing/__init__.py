"""Testing tools for rock and its plugins: the conformance suites and their helpers.

- :class:`RuntimeConformance` (:mod:`rock_core.testing.runtime_conformance`): subclass it in a
  test module, give it a ``runtime`` and an ``image`` fixture, and pytest checks your runtime
  against what rock expects of every runtime, with real units and real rocklets.
- :class:`ArchiveStoreConformance` (:mod:`rock_core.testing.archive_conformance`): the same for
  archive stores; give it a ``store`` fixture. Its helpers: :class:`GeneratedStream` (GiBs made
  as they are read, with their digest), :class:`PeakMemory` (this process's peak memory growth
  during a block), :func:`read_part`.
- :class:`RecordStoreConformance` (:mod:`rock_core.testing.record_conformance`): the same for
  record stores (:class:`rock_core.records.RecordStore`); give it a ``store`` fixture and its two
  backend hooks. :func:`sample_record` is a record with every kind of field set.
- :mod:`rock_core.testing.fixtures`: the helpers the suite is built from (:class:`Units`,
  :func:`wait_for_rocklet`, :func:`wait_for_unit`, :class:`PhaseLog`), and a pytest plugin
  with a few fixtures (:func:`~rock_core.testing.fixtures.docker_client` among them), loaded for
  all of rock's tests by the root ``conftest.py``.
- :mod:`rock_core.testing.waiting`: :func:`eventually` and :func:`eventually_async`, the one way
  a test waits for a condition.
- :mod:`rock_core.testing.plugin_site`: :class:`PluginSite` installs throwaway plugin
  distributions (a module and a ``rock`` entry point) into a folder, to load in-process or in a
  subprocess; :class:`NullRuntime` is a runtime that holds nothing, for such plugins to register.
- :mod:`rock_core.testing.faulty_http`: HTTP servers that fail their client on purpose
  (:class:`~rock_core.testing.faulty_http.DroppingServer` drops a connection mid-answer,
  :class:`~rock_core.testing.faulty_http.LosingProxy` forwards a request and loses the answer).
- :mod:`rock_core.testing.scripted_runtime`: :class:`ScriptedRuntime`, a runtime in memory whose
  calls a test holds at a :class:`Gate` and lets through, with one real rocklet
  (:func:`rocklet_in_thread`): the engine's races, forced in order without Docker or sleeps.

Needs pytest (and anyio's pytest plugin, which comes with anyio); rock itself never imports
this package.
"""

import pytest

# pytest rewrites asserts only in modules it is told about before they are imported: this way
# a failing check in the suite shows the values it compared, not just "AssertionError".
pytest.register_assert_rewrite(
    "rock_core.testing.fixtures",
    "rock_core.testing.runtime_conformance",
    "rock_core.testing.archive_conformance",
    "rock_core.testing.record_conformance",
    "rock_core.testing.waiting",
)

from rock_core.testing.archive_conformance import (  # noqa: E402
    ArchiveStoreConformance,
    GeneratedStream,
    PeakMemory,
    read_part,
)
from rock_core.testing.fixtures import (  # noqa: E402
    PhaseLog,
    StartedUnit,
    Units,
    eventually_empty,
    rocklet_call,
    rocklet_url,
    unique_sandbox_id,
    upper_echo_server,
    wait_for_rocklet,
    wait_for_unit,
)
from rock_core.testing.plugin_site import NullRuntime, PluginSite  # noqa: E402
from rock_core.testing.record_conformance import RecordStoreConformance, sample_record  # noqa: E402
from rock_core.testing.runtime_conformance import RuntimeConformance  # noqa: E402
from rock_core.testing.scripted_runtime import Gate, ScriptedRuntime, rocklet_in_thread  # noqa: E402
from rock_core.testing.waiting import eventually, eventually_async  # noqa: E402

__all__ = [
    "ArchiveStoreConformance",
    "Gate",
    "GeneratedStream",
    "NullRuntime",
    "PeakMemory",
    "PhaseLog",
    "PluginSite",
    "RecordStoreConformance",
    "RuntimeConformance",
    "ScriptedRuntime",
    "StartedUnit",
    "Units",
    "eventually",
    "eventually_async",
    "eventually_empty",
    "read_part",
    "rocklet_call",
    "rocklet_in_thread",
    "rocklet_url",
    "sample_record",
    "unique_sandbox_id",
    "upper_echo_server",
    "wait_for_rocklet",
    "wait_for_unit",
]
