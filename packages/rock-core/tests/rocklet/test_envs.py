"""The rocklet's env channel (``/env/*``) against a real rocklet and a stand-in ``gem`` package.

The stand-in has GEM's shape where the channel depends on it: ``gem.make``, a module-level
``ENV_REGISTRY``, ``reset(seed)`` seeding the process-global ``random``, a constructor that
imports lazily (``ImportError`` for a missing package), and ``logging.basicConfig`` at import.
rock-gem's tests run the real ``gem-llm`` in Docker sandboxes.
"""

from __future__ import annotations

import os
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rock_core.testing import eventually

from .conftest import SRC, RockletProcess, system_python

GEM_INIT = """
import logging
from gem.envs.registration import ENV_REGISTRY, make, register
from gem import games  # noqa: F401 - registers the ids
logging.basicConfig(level=logging.INFO)
__version__ = "0.0-test"
"""

REGISTRATION = """
import importlib
ENV_REGISTRY = {}

def register(env_id, entry_point, **kwargs):
    ENV_REGISTRY[env_id] = (entry_point, kwargs)

def make(env_id, **kwargs):
    if env_id not in ENV_REGISTRY:
        raise ValueError("Environment %s not found in registry." % env_id)
    entry_point, defaults = ENV_REGISTRY[env_id]
    module, _, name = entry_point.partition(":")
    try:
        cls = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise ImportError("Could not import %s. Error: %s" % (entry_point, exc))
    return cls(**dict(defaults, **kwargs))
"""

GAMES = """
import os, random, time
from gem.envs.registration import register

class Coin:
    def __init__(self, turns=5, slow_reset=0.0, gate=None):
        self.turns, self.slow_reset, self.turn, self.gate = turns, slow_reset, 0, None
        self.reset()
        self.gate = gate  # a test's gate holds the resets after the constructor's own

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        time.sleep(self.slow_reset)
        if self.gate:  # say the reset is in, and hold it until the test lets it out
            open(os.path.join(self.gate, "entered"), "w").close()
            while not os.path.exists(os.path.join(self.gate, "release")):
                time.sleep(0.01)
        self.turn = 0
        return "flip the coin", {"suffix": "turn 0"}

    def step(self, action):
        if action == "crash":
            os._exit(3)
        self.turn += 1
        value = random.random()
        done = self.turn >= self.turns
        return "drew %.12f" % value, value, done, done, {"turn": self.turn}

register("game:Coin-v0-easy", "gem.games:Coin")
register("game:Coin-v0-hard", "gem.games:Coin", turns=50)
register("game:Slow-v0", "gem.games:Coin", slow_reset=0.0)
register("math:Needs-datasets", "gem.needs_datasets:Env")
"""

NEEDS_DATASETS = "import datasets_package_that_is_not_here\n"


@pytest.fixture(scope="module")
def fake_gem(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fake-gem")
    pkg = root / "gem"
    (pkg / "envs").mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(GEM_INIT))
    (pkg / "envs" / "__init__.py").write_text("")
    (pkg / "envs" / "registration.py").write_text(textwrap.dedent(REGISTRATION))
    (pkg / "games.py").write_text(textwrap.dedent(GAMES))
    (pkg / "needs_datasets.py").write_text(NEEDS_DATASETS)
    return root


@pytest.fixture(scope="module", params=["source", "pyz"])
def rocklet(
    request: pytest.FixtureRequest,
    fake_gem: Path,
    pyz: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RockletProcess]:
    """A rocklet whose env worker finds the stand-in gem through ``$ROCK_ENV_PYTHONPATH``."""
    tmp = tmp_path_factory.mktemp("rocklet-envs-" + request.param)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["ROCK_ENV_PYTHONPATH"] = str(fake_gem)
    env["ROCK_ENV_PYTHON"] = system_python()
    if request.param == "source":
        env["PYTHONPATH"] = str(SRC)
        argv = [sys.executable, "-m", "rock_core.rocklet"]
    else:
        argv = [system_python(), "-I", str(pyz)]
    proc = RockletProcess(argv, tmp, env)
    yield proc
    assert proc.stop() == 0, proc.stderr_path.read_text(errors="replace")


def env_error(rocklet: RockletProcess, endpoint: str, **body: Any) -> dict[str, Any]:
    err = rocklet.error(endpoint, **body)
    assert err["class_path"] == "rock.rocklet.exceptions.EnvError"
    return err


def test_make_reset_step_close(rocklet: RockletProcess) -> None:
    made = rocklet.ok("/env/make", env_id="game:Coin-v0-easy")
    assert made["env_id"] == "game:Coin-v0-easy" and made["env"].startswith("e")
    assert made["pid"] != rocklet.proc.pid
    assert rocklet.ok("/env/reset", env=made["env"], seed=1) == {
        "observation": "flip the coin",
        "info": {"suffix": "turn 0"},
    }
    step = rocklet.ok("/env/step", env=made["env"], action="flip")
    assert set(step) == {"observation", "reward", "terminated", "truncated", "info"}
    assert step["terminated"] is False and step["info"] == {"turn": 1}
    assert rocklet.ok("/env/close", env=made["env"]) == {"env": made["env"], "closed": True}
    assert rocklet.ok("/env/close", env=made["env"]) == {"env": made["env"], "closed": False}
    err = env_error(rocklet, "/env/step", env=made["env"], action="flip")
    assert err["extra_info"]["kind"] == "no_env" and "closed" in err["message"]


def test_each_env_has_its_own_process(rocklet: RockletProcess) -> None:
    a = rocklet.ok("/env/make", env_id="game:Coin-v0-easy")
    b = rocklet.ok("/env/make", env_id="game:Coin-v0-easy")
    try:
        assert a["pid"] != b["pid"]
        listed = {e["env"]: e for e in rocklet.client.get("/env").json()["envs"]}
        assert {a["env"], b["env"]} <= set(listed)
    finally:
        rocklet.ok("/env/close", env=a["env"])
        rocklet.ok("/env/close", env=b["env"])


def test_same_seed_same_trajectory_while_other_envs_step(rocklet: RockletProcess) -> None:
    a = rocklet.ok("/env/make", env_id="game:Coin-v0-hard")["env"]
    b = rocklet.ok("/env/make", env_id="game:Coin-v0-hard")["env"]
    noise = rocklet.ok("/env/make", env_id="game:Coin-v0-hard")["env"]
    try:
        rocklet.ok("/env/reset", env=a, seed=7)
        rocklet.ok("/env/reset", env=noise, seed=99)
        first = []
        for _ in range(10):
            first.append(rocklet.ok("/env/step", env=a, action="x")["observation"])
            rocklet.ok("/env/step", env=noise, action="x")  # global RNG draws in between
        rocklet.ok("/env/reset", env=b, seed=7)
        second = [rocklet.ok("/env/step", env=b, action="x")["observation"] for _ in range(10)]
        assert first == second
    finally:
        for key in (a, b, noise):
            rocklet.ok("/env/close", env=key)


def test_unseeded_envs_do_not_replay_each_other(rocklet: RockletProcess) -> None:
    # Forked from one server, each env reseeds its generators: an unseeded reset is its own.
    keys = [rocklet.ok("/env/make", env_id="game:Coin-v0-hard")["env"] for _ in range(2)]
    try:
        draws = [rocklet.ok("/env/step", env=k, action="x")["reward"] for k in keys]
        assert draws[0] != draws[1]
    finally:
        for key in keys:
            rocklet.ok("/env/close", env=key)


def test_step_after_the_episode_ended_is_refused_until_reset(rocklet: RockletProcess) -> None:
    key = rocklet.ok("/env/make", env_id="game:Coin-v0-easy", kwargs={"turns": 1})["env"]
    try:
        last = rocklet.ok("/env/step", env=key, action="x")
        assert last["terminated"] and last["truncated"]
        err = env_error(rocklet, "/env/step", env=key, action="x")
        assert err["extra_info"]["kind"] == "episode_ended"
        assert "call reset()" in err["message"]
        rocklet.ok("/env/reset", env=key)
        assert rocklet.ok("/env/step", env=key, action="x")["terminated"]
    finally:
        rocklet.ok("/env/close", env=key)


def test_unknown_id_lists_close_matches(rocklet: RockletProcess) -> None:
    err = env_error(rocklet, "/env/make", env_id="game:Coin-v0")
    assert err["extra_info"]["kind"] == "unknown_env"
    assert "game:Coin-v0-easy" in err["message"] and "game:Coin-v0-hard" in err["message"]


def test_missing_package_fails_fast_naming_it(rocklet: RockletProcess) -> None:
    err = env_error(rocklet, "/env/make", env_id="math:Needs-datasets")
    assert err["extra_info"]["kind"] == "missing_dependency"
    assert "'datasets_package_that_is_not_here'" in err["message"]


def test_dead_env_process_is_a_clear_error(rocklet: RockletProcess) -> None:
    key = rocklet.ok("/env/make", env_id="game:Coin-v0-easy")["env"]
    err = env_error(rocklet, "/env/step", env=key, action="crash")
    assert err["extra_info"]["kind"] == "env_died"
    assert "has exited" in err["message"] and "game:Coin-v0-easy" in err["message"]
    again = env_error(rocklet, "/env/reset", env=key)
    assert again["extra_info"]["kind"] == "no_env" and "has exited" in again["message"]
    assert key not in {e["env"] for e in rocklet.client.get("/env").json()["envs"]}
    # the channel goes on
    other = rocklet.ok("/env/make", env_id="game:Coin-v0-easy")["env"]
    rocklet.ok("/env/close", env=other)


def test_slow_reset_blocks_neither_the_rocklet_nor_other_envs(
    rocklet: RockletProcess, tmp_path: Path
) -> None:
    import httpx

    gate = tmp_path / "gate"  # the slow env's reset waits there until the test releases it
    gate.mkdir()
    slow = rocklet.ok("/env/make", env_id="game:Slow-v0", kwargs={"gate": str(gate)}, timeout=30)[
        "env"
    ]
    fast = rocklet.ok("/env/make", env_id="game:Coin-v0-hard")["env"]
    done = threading.Event()

    def slow_reset() -> None:
        rocklet.client.post("/env/reset", json={"env": slow, "seed": 1}, timeout=60)
        done.set()

    thread = threading.Thread(target=slow_reset)
    thread.start()
    try:
        eventually(
            lambda: (gate / "entered").exists(), what="the slow reset in the env"
        )  # in flight, held
        assert not done.is_set()
        with httpx.Client(
            base_url=rocklet.url, headers=dict(rocklet.client.headers), timeout=60
        ) as other:
            assert other.get("/is_alive").json()["is_alive"] is True
            assert other.post("/env/step", json={"env": fast, "action": "x"}).status_code == 200
            assert other.post("/execute", json={"command": "true"}).status_code == 200
        assert not done.is_set(), "the other calls were answered while the slow reset ran"
    finally:
        (gate / "release").touch()
        thread.join()
        rocklet.ok("/env/close", env=slow)
        rocklet.ok("/env/close", env=fast)


def test_batch_runs_calls_across_envs_and_reports_each(rocklet: RockletProcess) -> None:
    keys = [rocklet.ok("/env/make", env_id="game:Coin-v0-hard")["env"] for _ in range(3)]
    try:
        answer = rocklet.ok(
            "/env/batch",
            calls=[
                {"env": keys[0], "op": "reset", "seed": 5},
                {"env": keys[1], "op": "reset", "seed": 5},
                {"env": keys[0], "op": "step", "action": "x"},
                {"env": keys[1], "op": "step", "action": "x"},
                {"env": "e999999", "op": "step", "action": "x"},
                {"env": keys[2], "op": "jump"},
                {"env": keys[2], "op": "step", "action": 5},  # refused by the env's process
                {"env": keys[2], "op": "reset", "seed": 5},
            ],
        )["results"]
        assert answer[0] == answer[1] and "ok" in answer[0]
        assert answer[2] == answer[3] and answer[2]["ok"]["info"] == {"turn": 1}
        assert answer[4]["error"]["kind"] == "no_env"
        assert answer[5]["error"]["kind"] == "bad_request"
        assert answer[6] == {
            "error": {"kind": "bad_request", "message": "action must be a string, got 5"}
        }
        assert answer[7] == answer[0]
    finally:
        for key in keys:
            rocklet.ok("/env/close", env=key)


def test_list_ids(rocklet: RockletProcess) -> None:
    ids = rocklet.ok("/env/list")["env_id"]
    assert "game:Coin-v0-easy" in ids and "math:Needs-datasets" in ids


def test_bad_requests_name_the_field(rocklet: RockletProcess) -> None:
    response = rocklet.post("/env/make", env_id="")
    assert response.status_code == 400 and "env_id" in response.json()["detail"]
    response = rocklet.post("/env/step", action="x")
    assert response.status_code == 400 and "'env'" in response.json()["detail"]


def test_a_python_without_gem_is_a_clear_error_and_a_pythonpath_brings_it(
    pyz: Path, tmp_path: Path, fake_gem: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["ROCK_ENV_PYTHON"] = system_python()
    env["ROCK_ENV_PYTHONPATH"] = str(tmp_path / "nothing-here")
    proc = RockletProcess([system_python(), "-I", str(pyz)], tmp_path, env)
    try:
        err = proc.error("/env/make", env_id="game:Sokoban-v0-easy")
        assert err["extra_info"]["kind"] == "missing_dependency"
        assert "cannot import GEM (package gem-llm)" in err["message"]
        assert err["extra_info"]["python"].startswith("3.")
        made = proc.ok("/env/make", env_id="game:Coin-v0-easy", pythonpath=str(fake_gem))
        assert proc.ok("/env/step", env=made["env"], action="x")["info"] == {"turn": 1}
        workers = proc.client.get("/env").json()["workers"]
        assert {w["pythonpath"] for w in workers if w["alive"]} == {str(fake_gem)}
    finally:
        assert proc.stop() == 0


def test_an_env_image_has_its_worker_started_with_the_rocklet(
    pyz: Path, tmp_path: Path, fake_gem: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(
        ROCK_ENV_PYTHON=system_python(), ROCK_ENV_PYTHONPATH=str(fake_gem), ROCK_ENV_PRESTART="1"
    )
    proc = RockletProcess([system_python(), "-I", str(pyz)], tmp_path, env)
    try:
        eventually(
            lambda: proc.client.get("/env").json()["workers"], what="a worker started", timeout=30
        )
        assert proc.client.get("/env").json()["workers"][0]["ready"] is True
        assert proc.client.get("/env").json()["envs"] == []
    finally:
        assert proc.stop() == 0


def test_an_env_past_its_timeout_is_ended_with_a_clear_error(rocklet: RockletProcess) -> None:
    key = rocklet.ok("/env/make", env_id="game:Coin-v0-easy")["env"]
    try:
        # The stand-in's reset sleeps slow_reset seconds (its constructor resets too, so the make
        # takes that long): four times the reset's timeout below.
        slow = rocklet.ok(
            "/env/make", env_id="game:Slow-v0", kwargs={"slow_reset": 2.0}, timeout=30
        )["env"]
        err = env_error(rocklet, "/env/reset", env=slow, timeout=0.5)
        assert err["extra_info"]["kind"] == "timeout" and "did not answer in time" in err["message"]
        assert (
            env_error(rocklet, "/env/step", env=slow, action="x")["extra_info"]["kind"] == "no_env"
        )
        assert rocklet.ok("/env/step", env=key, action="x")["info"] == {
            "turn": 1
        }  # the others go on
    finally:
        rocklet.ok("/env/close", env=key)
