"""GEM environments through ``rock.make`` / ``amake`` / ``make_vec`` (issue #11 point 3), on Docker.

Every behaviour runs embedded (this process's engine) and through a real admin over a socket
(``base_url``). The env image is the default, ROCK's ``python:3.11``, which has no GEM: each env
sandbox gets GEM's runtime uploaded (prepared offline by ``scripts/ensure-gem-image.sh``, which
also makes ``rock-gem/python:3.11`` with GEM built in).
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

import rock
from rock.sdk.envs import EnvFailed, VecEnvError
from rock_core.testing import eventually_async

from .conftest import no_python_env

pytestmark = pytest.mark.anyio

# Tests that reach into this process's embedded engine (its env processes, its provider's hosts);
# in the remote pass `engine` is the admin's client, and these ran already in the embedded pass.
embedded_only = pytest.mark.skipif(
    os.environ.get("ROCK_TEST_REMOTE", "") not in ("", "0"),
    reason="drives the embedded engine's own env processes; ran in the embedded pass",
)

ROOT = Path(__file__).resolve().parents[3]
DIRECTIONS = ("up", "down", "left", "right")

#: gem.md §3: the game ids that need numpy only (24).
NUMPY_ONLY_GAMES = [
    *(f"game:GuessTheNumber-v0-{d}" for d in ("easy", "hard", "random")),
    *(f"game:Mastermind-v0-{d}" for d in ("easy", "hard", "random")),
    *(f"game:Minesweeper-v0-{d}" for d in ("easy", "hard", "random")),
    *(f"game:Sudoku-v0-{d}" for d in ("easy", "hard", "random")),
    *(f"game:TowerofHanoi-v0-{d}" for d in ("easy", "hard", "random")),
    *(f"game:Game2048-v0-{d}" for d in ("easy", "hard", "extreme-hard", "random")),
    *(f"game:Sokoban-v0-{d}" for d in ("easy", "hard", "random")),
    "game:FifteenPuzzle-v0-easy",
    "game:FifteenPuzzle-v0-hard",
]
#: Seeds whose first room is quick to make, where seed 42's is not: Sokoban-v0-hard's room for
#: seed 42 takes about 13 s of CPU to generate, seed 1's about 1 s.
QUICK_SEEDS = {"game:Sokoban-v0-hard": 1}
#: A Sokoban-v0-hard seed whose room takes seconds to generate (1.5-3.5 s here, as loaded as
#: the tests run; seed 42's 10-25 s), a reset hundreds of times a step's time: the slow reset
#: test_a_slow_reset_does_not_hold_up_other_envs needs.
SLOW_SEED = 7
#: A well-formed action of each game (gem.md §2); any is fine for one step.
ACTIONS = {
    "GuessTheNumber": "\\boxed{3}",
    "Mastermind": "\\boxed{1 2}",
    "Minesweeper": "\\boxed{reveal 1 1}",
    "Sudoku": "\\boxed{1 1 1}",
    "TowerofHanoi": "\\boxed{A C}",
    "Game2048": "\\boxed{up}",
    "Sokoban": "\\boxed{up}",
    "FifteenPuzzle": "\\boxed{up}",
}


@pytest.fixture(scope="session")
def gem_image(docker_client: Any) -> str:
    """rock-gem's env image, made when missing (offline: uv fetches the wheels)."""
    subprocess.run([str(ROOT / "scripts" / "ensure-gem-image.sh")], check=True, timeout=600)
    return "rock-gem/python:3.11"


#: One env per mode held open while the tests on `where` (or `gem_api`) run, so that their makes
#: join its running sandbox instead of each starting one (and stopping it at close): a start
#: proves nothing there. Closed before any other test (they count, kill or race sandboxes).
_WARM: dict[str, Any] = {}


def _close_warm() -> None:
    while _WARM:
        _WARM.popitem()[1].close()


@pytest.fixture(autouse=True, scope="module")
def _warm_closed_at_the_end() -> Iterator[None]:
    yield
    _close_warm()


@pytest.fixture(autouse=True)
def _warm_only_for_where(request: pytest.FixtureRequest) -> None:
    if not {"where", "gem_api"} & set(request.fixturenames):
        _close_warm()


# Each test on `where` runs both modes itself, so the remote pass leaves it out (see conftest).
@pytest.fixture(
    params=[
        pytest.param(mode, marks=pytest.mark.driver_independent) for mode in ("embedded", "admin")
    ]
)
def where(
    request: pytest.FixtureRequest, gem_image: str, engine: Any, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """``make``'s keyword for the mode: nothing (embedded) or the admin's ``base_url``."""
    monkeypatch.delenv("ROCK_BASE_URL", raising=False)
    where = {"base_url": request.getfixturevalue("admin").url} if request.param == "admin" else {}
    if request.param not in _WARM:
        _WARM[request.param] = rock.make("game:GuessTheNumber-v0-easy", **where)
    return where


def play_sokoban_demo(where: dict[str, Any], seed: int = 42) -> list[tuple[str, Any]]:
    """ROCK's examples/sokoban_demo.py: random moves until terminated or truncated."""
    env = rock.make("game:Sokoban-v0-easy", **where)
    try:
        observation, info = env.reset(seed=seed)
        assert "Sokoban" in observation and "board" in info["suffix"]
        rng = random.Random(seed)
        trajectory = []
        while True:
            action = "\\boxed{%s}" % rng.choice(DIRECTIONS)
            observation, reward, terminated, truncated, info = env.step(action)
            trajectory.append((observation, reward))
            if terminated or truncated:
                return trajectory
    finally:
        env.close()
        env.close()  # idempotent


def test_sokoban_demo_runs_to_the_end(where: dict[str, Any]) -> None:
    trajectory = play_sokoban_demo(where)
    assert 1 <= len(trajectory) <= 20  # easy: 20 turns at most


def test_same_seed_same_trajectory_in_two_envs_with_others_stepping(where: dict[str, Any]) -> None:
    a = rock.make("game:Game2048-v0-hard", **where)  # 2048 spawns tiles from the global RNG
    b = rock.make("game:Game2048-v0-hard", **where)
    noise = rock.make("game:Game2048-v0-hard", **where)
    try:
        a.reset(seed=5)
        noise.reset(seed=6)
        moves = ["\\boxed{%s}" % d for d in ("up", "left", "down", "right") * 4]
        first = []
        for move in moves:
            first.append(a.step(move))
            noise.step(move)
        b.reset(seed=5)
        second = [b.step(move) for move in moves]
        assert first == second
    finally:
        for env in (a, b, noise):
            env.close()


def test_unknown_id_lists_close_matches(where: dict[str, Any]) -> None:
    with pytest.raises(EnvFailed) as caught:
        rock.make("game:Sokoban-v0", **where)
    assert caught.value.kind == "unknown_env"
    assert "game:Sokoban-v0-easy" in str(caught.value)


@pytest.mark.parametrize(
    ("env_id", "kind", "words"),
    # "not available offline" is rock's answer to nltk.download: NLTK's own would first ask the
    # network for its index (a 24 s stall here) and then say something else.
    [
        ("game:Wordle-v0-easy", "missing_data", "NLTK data 'words' is not available offline"),
        ("math:GSM8K", "missing_dependency", "'datasets'"),
    ],
)
def test_missing_offline_data_fails_fast_with_the_reason(
    where: dict[str, Any], env_id: str, kind: str, words: str
) -> None:
    # The sandbox's start is not the point here: an env made first and held open until after
    # keeps its sandbox running, and the failing make joins it (closed, it would take its
    # sandbox with it, and the failing make would start another).
    warm = rock.make("game:GuessTheNumber-v0-easy", **where)
    try:
        with pytest.raises(EnvFailed) as caught:
            rock.make(env_id, **where)
    finally:
        warm.close()
    assert caught.value.kind == kind and words in str(caught.value)


def test_step_after_the_episode_ended_is_refused_until_reset(where: dict[str, Any]) -> None:
    with rock.make("game:Sokoban-v0-easy", **where) as env:
        env.reset(seed=1)
        observation, reward, terminated, truncated, info = env.step(
            "not an action"
        )  # ends the episode
        assert terminated and reward == -0.1
        with pytest.raises(EnvFailed) as caught:
            env.step("\\boxed{up}")
        assert caught.value.kind == "episode_ended" and "reset()" in str(caught.value)
        env.reset(seed=1)
        assert env.step("\\boxed{up}")[2] in (True, False)


def test_an_image_with_gem_built_in_needs_no_upload(where: dict[str, Any], gem_image: str) -> None:
    with rock.make("game:Sokoban-v0-easy", image=gem_image, **where) as env:
        assert "board" in env.reset(seed=42)[1]["suffix"]


def test_a_closed_env_is_a_clear_error(where: dict[str, Any]) -> None:
    env = rock.make("game:GuessTheNumber-v0-easy", **where)
    env.close()
    with pytest.raises(EnvFailed, match="closed") as caught:
        env.step("\\boxed{1}")
    assert caught.value.kind == "no_env"


async def test_amake_is_the_async_twin(where: dict[str, Any]) -> None:
    async with await rock.amake("game:Sokoban-v0-easy", **where) as env:
        observation, info = await env.reset(seed=42)
        assert "board" in info["suffix"]
        result = await env.step("\\boxed{up}")
        assert len(result) == 5
    await env.aclose()


async def test_vector_env_partial_steps_and_explicit_resets(where: dict[str, Any]) -> None:
    vec = await rock.amake_vec("game:Sokoban-v0-easy", 4, seed=100, **where)
    try:
        observations, infos = await vec.reset()
        solo = rock.make("game:Sokoban-v0-easy", **where)
        try:
            assert solo.reset(seed=102)[1] == infos[2]  # env i gets seed + i
        finally:
            solo.close()
        obs, rewards, terminations, truncations, infos = await vec.step(
            {1: "\\boxed{up}", 3: "junk"}
        )
        assert len(obs) == 2 and terminations[1] is True  # junk ends env 3's episode
        with pytest.raises(VecEnvError) as caught:
            await vec.step(["\\boxed{up}"] * 4)
        assert set(caught.value.errors) == {3} and caught.value.errors[3].kind == "episode_ended"
        assert set(caught.value.results) == {0, 1, 2}
        await vec.reset(seed=[7], indices=[3])
        assert len((await vec.step(["\\boxed{up}"] * 4))[0]) == 4
    finally:
        await vec.aclose()


def test_every_numpy_only_game_makes_resets_and_steps(gem_image: str, engine: Any) -> None:
    vecs = []
    try:
        for env_id in NUMPY_ONLY_GAMES:
            env = rock.make(env_id)
            vecs.append(env)
            observation, info = env.reset(seed=QUICK_SEEDS.get(env_id, 42))
            assert isinstance(observation, str) and observation
            name = env_id.split(":")[1].split("-")[0]
            result = env.step(ACTIONS[name])
            assert isinstance(result[0], str) and isinstance(result[1], float)
            assert (
                isinstance(result[2], bool)
                and isinstance(result[3], bool)
                and isinstance(result[4], dict)
            )
    finally:
        for env in vecs:
            env.close()


def test_a_sokoban_seed_given_at_make_starts_the_room_reset_would(
    gem_image: str, engine: Any
) -> None:
    """make(seed=s) then step plays the room reset(seed=s) starts: GEM's Sokoban generates no
    room at make in rock (its first reset or step does), so a seed at make is that room's."""
    seeded = rock.make("game:Sokoban-v0-easy", seed=1)
    plain = rock.make("game:Sokoban-v0-easy")
    try:
        moves = ["\\boxed{up}", "\\boxed{left}", "\\boxed{down}"]
        played = [seeded.step(move) for move in moves]
        plain.reset(seed=1)
        assert played == [plain.step(move) for move in moves]
    finally:
        seeded.close()
        plain.close()


@embedded_only
def test_a_dead_env_process_is_a_clear_error_and_its_sandbox_is_stopped(
    gem_image: str, engine: Any, containers: Any
) -> None:
    from rock_core.actions import Command

    env = rock.make("game:Sokoban-v0-easy")
    provider_env = rock.sdk.envs._backend.backend_for(None)._envs[env.sandbox_id]
    sandbox_id = provider_env.sandbox_id

    async def kill() -> None:
        client = engine.manager.rocklet(sandbox_id)
        await client.execute(Command(command=["kill", "-9", str(provider_env.pid)]))

    engine.call_blocking(kill)
    _the_dead_env_fails_and_its_sandbox_goes(env, sandbox_id, containers)


def _the_dead_env_fails_and_its_sandbox_goes(env: Any, sandbox_id: str, containers: Any) -> None:
    """What a user sees of a Sokoban env whose process died: every call a clear ``env_died``
    error, its sandbox (where it was alone) stopped and removed, ``close()`` still fine."""
    with pytest.raises(EnvFailed) as caught:
        env.step("\\boxed{up}")
    assert caught.value.kind == "env_died" and "game:Sokoban-v0-easy" in str(caught.value)
    with pytest.raises(EnvFailed):
        env.reset()
    assert containers.gone(sandbox_id), "the sandbox whose only env died is stopped and removed"
    env.close()


# Finds, inside an env sandbox, the processes GEM's fork server forked (one per env): children of
# the `env_worker.py` process that is not itself a forked child. Prints their pids.
_ENV_PROCESSES = """
import os
def info(pid):
    with open("/proc/%s/stat" % pid) as f:
        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    with open("/proc/%s/cmdline" % pid, "rb") as f:
        return ppid, f.read()
procs = {}
for name in os.listdir("/proc"):
    if name.isdigit() and int(name) != os.getpid():
        try:
            procs[int(name)] = info(name)
        except OSError:
            pass
worker = [p for p, (pp, cmd) in procs.items() if b"env_worker" in cmd and b"env_worker" not in procs.get(pp, (0, b""))[1]]
print(" ".join(str(p) for p, (pp, _) in procs.items() if pp in worker))
"""


async def _kill_the_env_process(base_url: str, sandbox_id: str) -> None:
    """SIGKILL the only env process of ``sandbox_id``, its pid found inside the sandbox through
    the admin's sandbox API (the GEM routes do not tell it)."""
    from rock.sdk.sandbox.client import Sandbox
    from rock.sdk.sandbox.config import SandboxConfig
    from rock_core.actions import Command

    sandbox = Sandbox(SandboxConfig(base_url=base_url))
    await sandbox.attach(sandbox_id)
    found = await sandbox.execute(Command(command=["python3", "-c", _ENV_PROCESSES]))
    pids = found.stdout.split()
    assert len(pids) == 1, (
        f"one env process in the env's own sandbox, found {found.stdout!r} {found.stderr!r}"
    )
    killed = await sandbox.execute(Command(command=["kill", "-9", pids[0]]))
    assert killed.exit_code == 0, killed.stderr


def test_a_dead_env_process_is_a_clear_error_and_its_sandbox_is_stopped_through_the_admin(
    tmp_path_factory: pytest.TempPathFactory,
    docker_client: Any,
    admin_launcher: Any,
    gem_image: str,
    containers: Any,
) -> None:
    """The test above through a real admin's GEM routes (an admin of its own: the env is alone in
    its sandbox), the env's process killed by its pid from inside the sandbox."""
    launch_admin, stop_admin = admin_launcher
    server = launch_admin(
        tmp_path_factory.mktemp("gem-dead-env"), config=f'[plugins.gem]\nimage = "{gem_image}"\n'
    )
    try:
        env = rock.make("game:Sokoban-v0-easy", base_url=server.url)
        sandbox_id = env.sandbox_id.split(".")[0]
        asyncio.run(_kill_the_env_process(server.url, sandbox_id))
        _the_dead_env_fails_and_its_sandbox_goes(env, sandbox_id, containers)
    finally:
        stop_admin(server, docker_client)


def test_a_slow_reset_does_not_hold_up_other_envs(gem_image: str, engine: Any) -> None:
    async def run() -> None:
        slow = await rock.amake("game:Sokoban-v0-hard")
        fast = await rock.amake("game:Sokoban-v0-easy")
        try:
            assert slow.sandbox_id.split(".")[0] == fast.sandbox_id.split(".")[0]  # one sandbox
            reset = asyncio.create_task(slow.reset(seed=SLOW_SEED))  # seconds
            await eventually_async(
                lambda: _busy(fast, slow.sandbox_id), what="the slow reset reaching its env"
            )
            await fast.reset(seed=1)
            for _ in range(5):
                await fast.step("\\boxed{left}")
            assert not reset.done(), "the other env was served while the slow reset ran"
            await reset
        finally:
            await slow.aclose()
            await fast.aclose()

    asyncio.run(run())


async def _busy(lister: Any, handle: str) -> bool:
    """Whether env ``handle``'s process serves a request, as GEM's ``list`` of ``lister`` (an env
    of the same sandbox) tells it: the admin's route, or the embedded engine's provider."""
    backend = lister._backend
    if hasattr(backend, "engine"):  # embedded: the provider on the engine's loop
        env = backend._envs[lister.sandbox_id]
        listing = await backend.engine._call(env.provider.listing, env.handle)
    else:
        async with httpx.AsyncClient(base_url=backend.base_url, timeout=60) as http:
            answer = await http.post(
                "/apis/v1/envs/gem/list", json={"sandbox_id": lister.sandbox_id}
            )
            listing = answer.json()
    return handle in listing["busy"]


# -- ROCK's wire, on the admin ----------------------------------------------------------------


@pytest.fixture
def gem_api(admin: Any, gem_image: str) -> Iterator[httpx.Client]:
    if "admin" not in _WARM:  # see _WARM
        _WARM["admin"] = rock.make("game:GuessTheNumber-v0-easy", base_url=admin.url)
    with httpx.Client(base_url=admin.url + "/apis/v1/envs/gem", timeout=300) as client:
        yield client


def test_rock_wire_shapes(gem_api: httpx.Client) -> None:
    made = gem_api.post("/make", json={"env_id": "game:Sokoban-v0-easy"})
    assert made.status_code == 200 and set(made.json()) == {"sandbox_id"}
    handle = made.json()["sandbox_id"]
    reset = gem_api.post("/reset", json={"sandbox_id": handle, "seed": 42})
    assert reset.status_code == 200 and set(reset.json()) == {"observation", "info"}
    step = gem_api.post(
        "/step", json={"sandbox_id": handle, "action": "\\boxed{up}", "session": "ignored"}
    )
    assert step.status_code == 200
    assert set(step.json()) == {"observation", "reward", "terminated", "truncated", "info"}
    listed = gem_api.post("/list", json={"sandbox_id": handle})
    assert "game:Sokoban-v0-easy" in listed.json()["env_id"]
    assert gem_api.post("/close", json={"sandbox_id": handle}).json() == {"sandbox_id": handle}
    assert gem_api.post("/close", json={"sandbox_id": handle}).json() == {"sandbox_id": handle}


@pytest.mark.parametrize(
    ("path", "body", "error"),
    [
        ("/reset", {"sandbox_id": "  "}, "body.sandbox_id"),
        ("/reset", {"sandbox_id": "x", "seed": "forty-two"}, "body.seed"),
        ("/step", {"sandbox_id": "x"}, "body.action: Field required"),
        ("/step", {"action": "\\boxed{up}"}, "body.sandbox_id: Field required"),
        ("/close", {}, "body.sandbox_id: Field required"),
    ],
)
def test_rock_validation_errors_are_http_200_failed(
    gem_api: httpx.Client, path: str, body: dict[str, Any], error: str
) -> None:
    response = gem_api.post(path, json=body)
    assert response.status_code == 200
    answer = response.json()
    assert (
        answer["status"] == "Failed"
        and answer["message"] == "invalid parameter"
        and answer["result"] is None
    )
    assert error in answer["error"]


@pytest.mark.parametrize(
    ("path", "body", "detail"),
    [
        ("/make", {}, "env_id is required"),
        ("/make", {"env_id": "game:NoSuchGame-v0"}, "is not a registered GEM environment"),
        ("/step", {"sandbox_id": "nope.e1", "action": "x"}, "no GEM env"),
    ],
)
def test_rock_runtime_errors_are_http_500_detail(
    gem_api: httpx.Client, path: str, body: dict[str, Any], detail: str
) -> None:
    response = gem_api.post(path, json=body)
    assert response.status_code == 500
    assert detail in response.json()["detail"] and isinstance(response.json()["traceback"], list)


def test_a_batch_is_one_request(gem_api: httpx.Client) -> None:
    made = gem_api.post(
        "/batch", json={"calls": [{"op": "make", "env_id": "game:Sokoban-v0-easy"}] * 3}
    ).json()["results"]
    handles = [r["sandbox_id"] for r in made]
    results = gem_api.post(
        "/batch",
        json={
            "calls": [{"op": "reset", "sandbox_id": h, "seed": 9} for h in handles]
            + [{"op": "step", "sandbox_id": "nope.e1", "action": "x"}]
        },
    ).json()["results"]
    assert results[0] == results[1] == results[2]
    assert results[3]["error"]["kind"] == "no_env"
    invalid = gem_api.post(
        "/batch", json={"calls": [{"op": "step", "sandbox_id": handles[0]}]}
    ).json()
    assert invalid["status"] == "Failed" and "body.calls[0].action" in invalid["error"]
    closed = gem_api.post(
        "/batch", json={"calls": [{"op": "close", "sandbox_id": h} for h in handles]}
    ).json()["results"]
    assert closed == [{"sandbox_id": h} for h in handles]


# -- EnvHub (point 5), on the admin ----------------------------------------------------------


async def test_rocks_envhub_client_against_the_admin(admin: Any) -> None:
    from rock.sdk.envhub import EnvHubClient, EnvHubClientConfig, EnvHubError

    client = EnvHubClient(EnvHubClientConfig(base_url=admin.url))
    assert await client.health_check() == {"status": "ok"}
    info = await client.register(
        "t-hub-a", "img:1", owner="ann", tags=["games"], extra_spec={"k": 1}
    )
    assert info.env_name == "t-hub-a" and info.image == "img:1" and info.create_at
    await client.register("t-hub-b", "img:2", owner="bob", tags=["other"])
    assert (await client.get_env("t-hub-a")).extra_spec == {"k": 1}
    names = {e.env_name for e in await client.list_envs(owner="ann")}
    assert "t-hub-a" in names and "t-hub-b" not in names
    assert {e.env_name for e in await client.list_envs(tags=["other", "nothing"])} >= {"t-hub-b"}
    assert "EnvhubDefaultDockerImage" in {
        e.env_name for e in await client.list_envs(tags=["system"])
    }
    assert await client.delete_env("t-hub-a") is True
    assert await client.delete_env("t-hub-a") is False
    with pytest.raises(EnvHubError, match="t-hub-a"):
        await client.get_env("t-hub-a")


def test_an_env_moves_past_an_admin_it_cannot_reach(admin: Any, gem_image: str) -> None:
    """Several admins (a cluster's): an env call goes on to the next when the first cannot be
    connected to at all (the request never left)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"  # nothing listens once closed
    env = rock.make("game:GuessTheNumber-v0-easy", base_url=[closed, admin.url])
    try:
        observation, _info = env.reset(seed=3)
        assert observation
        env.step("\\boxed{5}")
    finally:
        env.close()


def test_envhub_http_errors_name_the_env(admin: Any) -> None:
    with httpx.Client(base_url=admin.url, timeout=30) as http:
        missing = http.post("/env/get", json={"env_name": "t-hub-none"})
        assert missing.status_code == 404 and "t-hub-none" in missing.json()["detail"]
        bad = http.post("/env/register", json={"env_name": "x", "image": "  "})
        assert bad.status_code == 422 and "image" in bad.json()["detail"]
        assert http.post("/env/delete", json={"env_name": "t-hub-none"}).status_code == 404


def test_rock_envhub_without_a_url_uses_the_admin_running_here(admin: Any) -> None:
    """As `rock sandbox` does: with an admin `rock admin start` runs for this state directory,
    `rock envhub` talks to it, not to a database of its own the admin never reads."""
    if admin.process is None:
        pytest.skip("the suite's admin was given (ROCK_TEST_ADMIN_URL): no state directory here")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ROCK_BASE_URL", "ROCK_ENVHUB_BASE_URL", "ROCK_ENVHUB_DB_URL")
    }
    env["ROCK_ADMIN_STATE_DIR"] = str(admin.state_dir)
    done = subprocess.run(
        [*_rock(), "envhub", "register", "t-hub-local", "img:local"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with httpx.Client(base_url=admin.url, timeout=30) as http:
        found = http.post("/env/get", json={"env_name": "t-hub-local"})
        assert found.status_code == 200 and found.json()["image"] == "img:local", found.text
        http.post("/env/delete", json={"env_name": "t-hub-local"})


def test_make_resolves_an_envhub_name_to_its_image_and_defaults(admin: Any, gem_image: str) -> None:
    from rock_core.errors import InvalidParameter  # noqa: F401

    subprocess.run(
        [
            *_rock(),
            "envhub",
            "register",
            "t-hub-sokoban",
            gem_image,
            "--gem-id",
            "game:Sokoban-v0-easy",
            "--extra-spec",
            '{"kwargs": {"max_turns": 2}}',
            "--tag",
            "t-hub",
            "--base-url",
            admin.url,
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    listed = subprocess.run(
        [*_rock(), "envhub", "list", "--tag", "t-hub", "--base-url", admin.url],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "t-hub-sokoban" in listed.stdout
    env = rock.make("t-hub-sokoban", base_url=admin.url)
    try:
        env.reset(seed=3)
        assert env.step("\\boxed{up}")[2:4] == (False, False)
        assert env.step("\\boxed{up}")[3] is True  # max_turns=2 from the entry's extra_spec
    finally:
        env.close()
    subprocess.run(
        [*_rock(), "envhub", "delete", "t-hub-sokoban", "--base-url", admin.url],
        check=True,
        capture_output=True,
        timeout=60,
    )
    with pytest.raises(EnvFailed) as caught:
        rock.make("t-hub-sokoban", base_url=admin.url)
    assert caught.value.kind == "unknown_env" and "t-hub-sokoban" in str(caught.value)


def _rock() -> list[str]:
    import shutil
    import sys

    exe = shutil.which("rock", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "rock.cli"]


def test_rock_bench_gem_prints_its_figures(gem_image: str) -> None:
    out = subprocess.run(
        [
            *_rock(),
            "bench",
            "gem",
            "--steps",
            "20",
            "--envs",
            "4",
            "--groups",
            "2",
            "--seconds",
            "0.5",  # the figures' shape is the point here; the least the bench takes
            "--makes",
            "2",
            "--idle-envs",
            "2",
            "--rounds",
            "2",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    import json

    figures = json.loads(out)
    assert set(figures) >= {
        "step_round_trip",
        "batched",
        "make_to_first_observation",
        "idle_memory",
    }
    assert (
        figures["batched"]["env_steps_per_second"] > 0
        and figures["idle_memory"]["pss_per_env_mb"] > 0
    )
    # its floor, GEM over pipes with a process per core, ran in the same run, taking turns
    batched = figures["batched"]
    assert len(batched["rounds_floor_env_steps_per_second"]) == 2
    assert batched["floor_env_steps_per_second"] > 0 and batched["ratio_to_floor"] > 0
    # like the floor's, the envs share one sandbox's processes, one per core
    assert figures["gem_options"] == {"envs_per_sandbox": 4, "shared_processes": 2}


# -- rl-rock 1.11's own client (ROCK's SDK) against rock's admin --------------------------------

ROCK_DEMO = r"""
import random, sys
import rock  # rl-rock's package

env = rock.make("game:Sokoban-v0-easy")
observation, info = env.reset(seed=42)
assert "Sokoban" in observation, observation
turns = 0
while True:
    observation, reward, terminated, truncated, info = env.step("\\boxed{%s}" % random.choice(["up", "down", "left", "right"]))
    turns += 1
    if terminated or truncated:
        break
env.close()
env.close()
print("ok", turns, type(env).__module__)
"""


def test_rl_rocks_own_make_plays_the_sokoban_demo_against_rocks_admin(
    rl_rock_python: str, admin: Any, gem_image: str
) -> None:
    env = {**no_python_env(), "ROCK_BASE_URL": admin.url}
    done = subprocess.run(
        [rl_rock_python, "-c", ROCK_DEMO], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("ok ") and "rock.sdk.envs.rock_env" in done.stdout


def _requests_to(http: httpx.Client, route: str) -> float:
    """The admin's count of answered requests to ``route`` (/metrics, every outcome)."""
    import re

    total = 0.0
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("rock_http_requests_total{") and f'route="{route}"' in line:
            total += float(re.split(r"\s+", line)[-1])
    return total


async def test_a_vector_step_is_one_http_request_through_the_admin(
    admin: Any, gem_image: str
) -> None:
    vec = await rock.amake_vec("game:Sokoban-v0-easy", 6, seed=1, base_url=admin.url)
    try:
        await vec.reset()
        with httpx.Client(base_url=admin.url, timeout=30) as http:
            batch, step = (
                _requests_to(http, "/apis/v1/envs/gem/batch"),
                _requests_to(http, "/apis/v1/envs/gem/step"),
            )
            await vec.step(["\\boxed{up}"] * 6)
            await vec.step({0: "\\boxed{left}", 5: "\\boxed{left}"})
            assert _requests_to(http, "/apis/v1/envs/gem/batch") == batch + 2
            assert _requests_to(http, "/apis/v1/envs/gem/step") == step
    finally:
        await vec.aclose()


def test_an_env_answers_only_the_api_key_that_made_it(
    tmp_path_factory: pytest.TempPathFactory,
    docker_client: Any,
    admin_launcher: Any,
    gem_image: str,
) -> None:
    import uuid

    from rock.admin.auth import hash_key

    key_a, key_b = "key-a-" + uuid.uuid4().hex, "key-b-" + uuid.uuid4().hex
    launch_admin, stop_admin = admin_launcher
    config = (
        f'[admin]\napi_keys = [{{ tenant = "a", sha256 = "{hash_key(key_a)}" }}, {{ tenant = "b", sha256 = "{hash_key(key_b)}" }}]\n'
        f'[plugins.gem]\nimage = "{gem_image}"\n'
    )
    server = launch_admin(tmp_path_factory.mktemp("gem-keys"), config=config)
    try:
        env = rock.make("game:GuessTheNumber-v0-easy", base_url=server.url, api_key=key_a)
        try:
            env.reset(seed=1)
            with httpx.Client(
                base_url=server.url + "/apis/v1/envs/gem", headers={"X-API-Key": key_b}, timeout=60
            ) as other:
                answer = other.post(
                    "/step", json={"sandbox_id": env.sandbox_id, "action": "\\boxed{3}"}
                )
                assert answer.status_code == 500 and "no GEM env" in answer.json()["detail"]
            assert len(env.step("\\boxed{3}")) == 5  # its own key still drives it
        finally:
            env.close()
    finally:
        stop_admin(server, docker_client)


def test_envs_per_sandbox_is_a_setting_and_envs_share_sandboxes(
    tmp_path_factory: pytest.TempPathFactory,
    docker_client: Any,
    admin_launcher: Any,
    gem_image: str,
) -> None:
    launch_admin, stop_admin = admin_launcher
    server = launch_admin(
        tmp_path_factory.mktemp("gem-per-sandbox"),
        config=f'[plugins.gem]\nimage = "{gem_image}"\nenvs_per_sandbox = 2\n',
    )
    try:
        vec = rock.make_vec("game:GuessTheNumber-v0-easy", 5, base_url=server.url)
        try:
            sandboxes = [handle.split(".")[0] for handle in vec.handles]
            assert len(set(sandboxes)) == 3 and max(sandboxes.count(s) for s in sandboxes) == 2
            assert len(vec.reset(seed=1)[0]) == 5
        finally:
            vec.close()
    finally:
        stop_admin(server, docker_client)


@embedded_only
async def test_a_make_cancelled_while_its_sandbox_starts_leaves_nothing_behind(
    gem_image: str, engine: Any, containers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    await asyncio.to_thread(engine.start)
    # A gate: the engine's unit starts wait until the test lets them through, so the env
    # sandbox is still starting when the second make joins it and is cancelled.
    runtime = engine.manager.runtime
    entered, released = threading.Event(), threading.Event()
    start = runtime.start

    async def held_start(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        await anyio.to_thread.run_sync(released.wait)
        return await start(*args, **kwargs)

    monkeypatch.setattr(runtime, "start", held_start)

    def starting(slots: int) -> bool:
        providers = engine.manager._env_providers  # made at the first make
        hosts = providers["gem"]._hosts if providers else []
        return any(host.slots == slots and not host.ready.is_set() for host in hosts)

    try:
        first = asyncio.create_task(rock.amake("game:GuessTheNumber-v0-hard", image=gem_image))
        await eventually_async(lambda: starting(1), what="the first make starting a sandbox")
        second = asyncio.create_task(rock.amake("game:GuessTheNumber-v0-hard", image=gem_image))
        await eventually_async(
            lambda: starting(2), what="the second make waiting to join the starting sandbox"
        )
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        await eventually_async(entered.is_set, what="the env sandbox's start held at the gate")
    finally:
        released.set()
    env = await first
    sandbox_id = env.sandbox_id.split(".")[0]
    await env.aclose()  # its last env: the sandbox stops
    assert containers.gone(sandbox_id)


async def _starting_sandbox(base_url: str, timeout: float = 60.0) -> str:
    """The id of the admin's first sandbox, once it is listed, while it is still pending."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:

        async def items() -> list[dict[str, Any]]:
            page = (await http.get("/apis/envs/sandbox/v1/sandboxes")).json()["result"]
            return list(page["items"])

        listed = await eventually_async(
            items, what="the env sandbox listed by the admin", timeout=timeout, interval=0.005
        )
    item = listed[0]
    if item["state"] != "pending":
        pytest.skip("the env sandbox was running before the test saw it start")
    return str(item["sandbox_id"])


async def _joined(base_url: str, sandbox_id: str) -> dict[str, Any] | None:
    """Env sandbox ``sandbox_id`` as rock-gem lists it, once a make waits for its start (or it
    is ready: no make will wait any more)."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        answer = await http.post("/apis/v1/envs/gem/sandboxes", json={})
    for host in answer.json()["sandboxes"]:
        if host["sandbox_id"] == sandbox_id and (host["waiting"] == 1 or host["ready"]):
            return dict(host)
    return None


async def _state_of(base_url: str, sandbox_id: str) -> str:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        answer = await http.get(
            "/apis/envs/sandbox/v1/get_status", params={"sandbox_id": sandbox_id}
        )
        return str(answer.json()["result"]["state"])


async def test_a_make_cancelled_through_the_client_while_its_sandbox_starts_leaves_nothing_behind(
    tmp_path_factory: pytest.TempPathFactory,
    docker_client: Any,
    admin_launcher: Any,
    gem_image: str,
    containers: Any,
) -> None:
    """The test above through a real admin's GEM routes: the second make, sent while the first
    one's sandbox starts, is cancelled in the client (its HTTP request dropped); once the first
    env closes, its sandbox stops and nothing of the cancelled make keeps it."""
    launch_admin, stop_admin = admin_launcher
    server = launch_admin(
        tmp_path_factory.mktemp("gem-cancel"), config=f'[plugins.gem]\nimage = "{gem_image}"\n'
    )
    try:
        first = asyncio.create_task(rock.amake("game:GuessTheNumber-v0-hard", base_url=server.url))
        sandbox_id = await _starting_sandbox(server.url)
        second = asyncio.create_task(rock.amake("game:GuessTheNumber-v0-hard", base_url=server.url))
        host = await eventually_async(
            lambda: _joined(server.url, sandbox_id),
            what="the second make waiting for the starting sandbox",
            interval=0.005,
        )
        if host["ready"] or await _state_of(server.url, sandbox_id) != "pending":
            first.cancel()
            second.cancel()
            pytest.skip(
                "the sandbox started before the second make could be cancelled while it waited"
            )
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        env = await first
        assert env.sandbox_id.split(".")[0] == sandbox_id
        await env.aclose()  # its last env: the sandbox stops
        assert containers.gone(sandbox_id), (
            "the cancelled make left an env that keeps the sandbox running"
        )
    finally:
        stop_admin(server, docker_client)


def test_an_admin_restarted_stops_the_env_sandboxes_of_its_old_process(
    tmp_path_factory: pytest.TempPathFactory,
    docker_client: Any,
    admin_launcher: Any,
    gem_image: str,
    containers: Any,
) -> None:
    import signal

    launch_admin, stop_admin = admin_launcher
    state = tmp_path_factory.mktemp("gem-restart")
    config = f'[plugins.gem]\nimage = "{gem_image}"\n'
    first = launch_admin(state, config=config)
    try:
        old = rock.make("game:GuessTheNumber-v0-easy", base_url=first.url)
        old_sandbox = old.sandbox_id.split(".")[0]
    finally:
        assert first.process is not None
        first.process.send_signal(signal.SIGTERM)  # the admin leaves its sandboxes running
        first.process.wait(60)
    assert containers(old_sandbox), "the env sandbox outlives its admin"
    second = launch_admin(state, config=config, port=first.port)
    try:
        with pytest.raises(EnvFailed, match="no GEM env"):
            old.step("\\boxed{3}")  # its env died with the old process
        new = rock.make("game:GuessTheNumber-v0-easy", base_url=second.url)
        try:
            assert new.sandbox_id.split(".")[0] != old_sandbox
            assert containers.gone(old_sandbox), (
                "the old env sandbox is stopped at the new admin's first env"
            )
        finally:
            new.close()
    finally:
        stop_admin(second, docker_client)
