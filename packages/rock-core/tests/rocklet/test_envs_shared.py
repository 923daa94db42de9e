"""Envs sharing a process (``/env/make`` with ``share``, issue #28 point 4), against a real
rocklet and the stand-in ``gem`` of :mod:`.test_envs` (whose Coin draws from the process-global
``random`` at every step, as GEM's games do)."""

from __future__ import annotations

from typing import Any

from .conftest import RockletProcess
from .test_envs import env_error, fake_gem, rocklet  # noqa: F401 - the fixtures

SEED = 7


def _trajectory(rocklet: RockletProcess, key: str, steps: int = 12) -> list[Any]:
    rocklet.ok("/env/reset", env=key, seed=SEED)
    return [rocklet.ok("/env/step", env=key, action="x")["observation"] for _ in range(steps)]


def test_envs_sharing_a_process_give_the_trajectories_they_give_alone(
    rocklet: RockletProcess,
) -> None:
    alone = rocklet.ok("/env/make", env_id="game:Coin-v0-hard")["env"]
    expected = _trajectory(rocklet, alone)
    rocklet.ok("/env/close", env=alone)

    made = [rocklet.ok("/env/make", env_id="game:Coin-v0-hard", share=1) for _ in range(3)]
    keys = [m["env"] for m in made]
    try:
        assert len({m["pid"] for m in made}) == 1, "one process hosts the three envs"
        a, noise, b = keys
        rocklet.ok("/env/reset", env=a, seed=SEED)
        rocklet.ok("/env/reset", env=noise)  # unseeded: draws from its own generators
        first = []
        for _ in range(12):  # the other env of the process draws between each of a's steps
            first.append(rocklet.ok("/env/step", env=a, action="x")["observation"])
            rocklet.ok("/env/step", env=noise, action="x")
        assert first == expected

        # in batches too: both seeded alike, interleaved in one message to the process
        calls = [{"env": k, "op": "reset", "seed": SEED} for k in (b, a)]
        calls += [{"env": k, "op": "step", "action": "x"} for _ in range(12) for k in (b, noise, a)]
        results = rocklet.ok("/env/batch", calls=calls)["results"]
        steps = results[2:]
        for offset, key in enumerate((b, noise, a)):
            observations = [r["ok"]["observation"] for r in steps[offset::3]]
            if key != noise:
                assert observations == expected, key
    finally:
        for key in keys:
            rocklet.ok("/env/close", env=key)


def test_unseeded_envs_sharing_a_process_do_not_replay_each_other(
    rocklet: RockletProcess,
) -> None:
    keys = [rocklet.ok("/env/make", env_id="game:Coin-v0-hard", share=1)["env"] for _ in range(2)]
    try:
        draws = [rocklet.ok("/env/step", env=k, action="x")["reward"] for k in keys]
        assert draws[0] != draws[1]
    finally:
        for key in keys:
            rocklet.ok("/env/close", env=key)


def test_shared_processes_are_as_many_as_asked_and_end_with_their_last_env(
    rocklet: RockletProcess,
) -> None:
    made = [rocklet.ok("/env/make", env_id="game:Coin-v0-easy", share=2) for _ in range(4)]
    pids = {m["pid"] for m in made}
    assert len(pids) == 2, made
    listed = {e["env"]: e for e in rocklet.client.get("/env").json()["envs"]}
    assert all(listed[m["env"]]["shared"] for m in made)
    first, *rest = made
    rocklet.ok("/env/close", env=first["env"])
    # the other envs of its process go on
    for m in rest:
        assert rocklet.ok("/env/step", env=m["env"], action="x")["info"] == {"turn": 1}
    for m in rest:
        rocklet.ok("/env/close", env=m["env"])
    assert not [e for e in rocklet.client.get("/env").json()["envs"] if e["pid"] in pids]


def test_a_crash_in_a_shared_process_ends_each_of_its_envs_clearly(
    rocklet: RockletProcess,
) -> None:
    a, b = (rocklet.ok("/env/make", env_id="game:Coin-v0-easy", share=1)["env"] for _ in range(2))
    err = env_error(rocklet, "/env/step", env=a, action="crash")
    assert err["extra_info"]["kind"] == "env_died" and "has exited" in err["message"]
    for key in (a, b):
        again = env_error(rocklet, "/env/step", env=key, action="x")
        assert again["extra_info"]["kind"] == "no_env" and "has exited" in again["message"]
    # a new shared env gets a new process
    other = rocklet.ok("/env/make", env_id="game:Coin-v0-easy", share=1)["env"]
    assert rocklet.ok("/env/step", env=other, action="x")["info"] == {"turn": 1}
    rocklet.ok("/env/close", env=other)


def test_a_bad_share_is_named(rocklet: RockletProcess) -> None:
    response = rocklet.post("/env/make", env_id="game:Coin-v0-easy", share=-1)
    assert response.status_code == 400 and "'share'" in response.json()["detail"]
