"""GEM envs sharing a process (``[plugins.gem] shared_processes``, issue #28 point 4): each env's
trajectory is exactly what it is alone, whatever the other envs of its process draw meanwhile.
Real GEM games (2048 spawns its tiles from the process-global generators) in Docker sandboxes;
"alone" is this process's embedded engine, where each env has a process of its own."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

import rock

ROOT = Path(__file__).resolve().parents[3]
GAME = "game:Game2048-v0-hard"
MOVES = ["\\boxed{%s}" % d for d in ("up", "left", "down", "right") * 5]


@pytest.fixture(scope="module")
def gem_image(docker_client: Any) -> str:
    subprocess.run([str(ROOT / "scripts" / "ensure-gem-image.sh")], check=True, timeout=600)
    return "rock-gem/python:3.11"


@pytest.fixture(scope="module")
def shared_admin(
    gem_image: str,
    admin_launcher: Any,
    docker_client: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Any:
    """An admin whose envs share one process per sandbox."""
    launch_admin, stop_admin = admin_launcher
    config = f'[plugins.gem]\nimage = "{gem_image}"\nshared_processes = 1\n'
    server = launch_admin(tmp_path_factory.mktemp("gem-shared"), config=config)
    yield server
    stop_admin(server, docker_client)


def _play(env: Any, seed: int) -> list[Any]:
    trajectory: list[Any] = [env.reset(seed=seed)]
    for move in MOVES:
        trajectory.append(env.step(move))
        if trajectory[-1][2] or trajectory[-1][3]:
            break
    return trajectory


def _alone(seed: int, engine: Any, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    monkeypatch.delenv("ROCK_BASE_URL", raising=False)
    env = rock.make(GAME)  # embedded: a process of its own
    try:
        return _play(env, seed)
    finally:
        env.close()


def test_envs_sharing_a_process_play_as_they_do_alone(
    shared_admin: Any, engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _alone(5, engine, monkeypatch)
    a, noise, b = (rock.make(GAME, base_url=shared_admin.url) for _ in range(3))
    try:
        assert len({e.sandbox_id.split(".")[0] for e in (a, noise, b)}) == 1
        first: list[Any] = [a.reset(seed=5)]
        noise.reset(seed=6)
        for move in MOVES:  # the other env of the process draws between each of a's steps
            first.append(a.step(move))
            noise.step(move)
            if first[-1][2] or first[-1][3]:
                break
        assert first == expected
        assert _play(b, 5) == expected
    finally:
        for env in (a, noise, b):
            env.close()


def test_a_vector_env_of_shared_processes_steps_each_env_as_alone(
    shared_admin: Any, engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = {seed: _alone(seed, engine, monkeypatch) for seed in (5, 9)}
    vec = rock.make_vec(GAME, 3, seed=0, base_url=shared_admin.url)
    try:
        seeds = [5, 9, 5]
        observations, infos = vec.reset(seed=seeds, indices=[0, 1, 2])
        got: list[list[Any]] = [[(observations[i], infos[i])] for i in range(3)]
        for move in MOVES:  # one batch per move: the three envs' calls in one message
            live = [
                i for i in range(3) if not (len(got[i]) > 1 and (got[i][-1][2] or got[i][-1][3]))
            ]
            if not live:
                break
            obs, rewards, terminated, truncated, step_infos = vec.step({i: move for i in live})
            for k, i in enumerate(live):
                got[i].append((obs[k], rewards[k], terminated[k], truncated[k], step_infos[k]))
        for i, seed in enumerate(seeds):
            assert got[i] == expected[seed][: len(got[i])] and len(got[i]) == len(expected[seed])
    finally:
        vec.close()


def test_batches_asked_together_go_as_one_request_and_each_env_plays_as_alone(
    shared_admin: Any, engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An async trainer steps the live envs while it resets the ended ones: the two batches
    asked in one turn of its loop are one request to the admin (one message to the process)."""
    import asyncio

    from rock.sdk.envs._backend import backend_for
    from rock_core.errors import InvalidParameter

    expected = {seed: _alone(seed, engine, monkeypatch) for seed in (5, 9)}
    backend = backend_for(shared_admin.url)
    sent: list[int] = []
    send = backend._abatch

    async def counted(calls: Any) -> list[Any]:
        sent.append(len(calls))
        return await send(calls)

    monkeypatch.setattr(backend, "_abatch", counted)

    async def play() -> list[list[Any]]:
        vec = await rock.amake_vec(GAME, 2, seed=0, base_url=shared_admin.url)
        try:
            observations, infos = await vec.reset(seed=[5, 1], indices=[0, 1])
            got: list[list[Any]] = [[(observations[0], infos[0])], []]
            del sent[:]
            for n, move in enumerate(MOVES):
                if any(len(t) > 1 and (t[-1][2] or t[-1][3]) for t in got):
                    break
                # env 1 is reset (seed 9) beside env 0's first step, then they step side by side
                one = vec.reset(seed=[9], indices=[1]) if n == 0 else vec.step({1: MOVES[n - 1]})
                a, b = await asyncio.gather(vec.step({0: move}), one)
                got[0].append(tuple(x[0] for x in a))
                got[1].append((b[0][0], b[1][0]) if n == 0 else tuple(x[0] for x in b))
            # each turn's two batches went as one request
            assert sent == [2] * len(sent) and len(sent) > 5
            # a malformed batch asked beside a good one fails alone
            handles = vec.handles
            good, bad = await asyncio.gather(
                backend.abatch([("step", handles[0], {"action": MOVES[0]})]),
                backend.abatch([("reset", handles[1], {"seed": -1})]),
                return_exceptions=True,
            )
            assert "observation" in good[0] and isinstance(bad, InvalidParameter)
            assert "seed" in str(bad)
            return got
        finally:
            await vec.aclose()

    got = asyncio.run(play())
    assert got[0] == expected[5][: len(got[0])] and got[1] == expected[9][: len(got[1])]
