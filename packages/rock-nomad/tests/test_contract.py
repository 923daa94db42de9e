"""The Nomad API contract (rock_nomad.testing.contract), against the stand-in and a real agent,
spoken in plain HTTP and through python-nomad (rock_nomad.testing.python_nomad_contract).

Against the stand-in: a 2-node stand-in with ACLs on, shared by the module's tests. Against a
real Nomad agent: only when ``NOMAD_ADDR`` is set (with ``NOMAD_TOKEN`` when its ACLs are on,
``ROCK_NOMAD_TEST_IMAGE`` for an image its nodes hold, default ``rock-test/python:3.11``).
"""

from __future__ import annotations

import os

import pytest

from rock_nomad.testing import StandInNomad
from rock_nomad.testing.contract import NomadApiContract, NomadTarget
from rock_nomad.testing.python_nomad_contract import PythonNomadContract

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def stand_in(docker_client):
    with StandInNomad(nodes=2, acl=True) as nomad:
        yield nomad


@pytest.fixture
def stand_in_target(stand_in) -> NomadTarget:
    return NomadTarget(
        address=stand_in.address,
        token=stand_in.management_token,
        acl=True,
        label="the stand-in",
        extra={"stand_in": stand_in},
    )


@pytest.fixture
def agent_target() -> NomadTarget:
    address = os.environ["NOMAD_ADDR"]
    token = os.environ.get("NOMAD_TOKEN") or None
    return NomadTarget(
        address=address,
        token=token,
        acl=token is not None,
        label=f"the agent at {address}",
        image=os.environ.get("ROCK_NOMAD_TEST_IMAGE", "rock-test/python:3.11"),
    )


class TestStandInContract(NomadApiContract):
    @pytest.fixture
    def nomad_target(self, stand_in_target) -> NomadTarget:
        return stand_in_target


class TestStandInThroughPythonNomad(PythonNomadContract):
    @pytest.fixture
    def nomad_target(self, stand_in_target) -> NomadTarget:
        return stand_in_target


if os.environ.get("NOMAD_ADDR"):

    class TestAgentContract(NomadApiContract):
        @pytest.fixture
        def nomad_target(self, agent_target) -> NomadTarget:
            return agent_target

    class TestAgentThroughPythonNomad(PythonNomadContract):
        @pytest.fixture
        def nomad_target(self, agent_target) -> NomadTarget:
            return agent_target

else:

    def test_the_contract_against_a_real_nomad_agent() -> None:
        pytest.skip(
            "NOMAD_ADDR is not set: no real Nomad agent to check the contract against "
            "(TestStandInContract runs the same suite against the stand-in)"
        )

    def test_the_contract_through_python_nomad_against_a_real_nomad_agent() -> None:
        pytest.skip(
            "NOMAD_ADDR is not set: no real Nomad agent to drive through python-nomad "
            "(TestStandInThroughPythonNomad runs the same suite against the stand-in)"
        )
