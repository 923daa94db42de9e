"""Many starts in one request: ``POST /sandboxes/start_batch`` and the SDK's start batches.

A trainer starting thousands of sandboxes at once from one process sends the starts asked in one
turn of its event loop as one request; each is still admitted for the caller's tenant (its
quota, its own ids), and each caller gets its own sandbox or its own error. A real admin over
its socket (``python -m rock.bench.scripted_admin``: the admin's routes, engine and store on the
scripted runtime, no containers), with API keys: ``team-a`` and ``team-b``, and ``team-q`` with a
quota of 3 sandboxes. The admin's ``/metrics`` count the requests of each route.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rock.admin.auth import hash_key
from rock.sdk._drivers.remote import RemoteDriver
from rock_core.actions import SandboxStartRequest
from rock_core.errors import InvalidParameter, QuotaExceeded, SandboxAlreadyExists

PREFIX = "/apis/envs/sandbox/v1"
KEY_A = "key-a-" + uuid.uuid4().hex
KEY_B = "key-b-" + uuid.uuid4().hex
KEY_Q = "key-q-" + uuid.uuid4().hex
#: A start by Docker's image id: refused for a tenant (rock_core.tenancy.check_image_by_name).
IMAGE_ID = "sha256:" + "ab" * 32


@pytest.fixture(scope="module")
def admin() -> Iterator[str]:
    """A scripted admin process with keys on a free port; its URL."""
    state_dir = Path(tempfile.mkdtemp(prefix="rock-start-batch-"))
    config = state_dir / "admin.toml"
    config.write_text(
        "[admin]\napi_keys = [\n"
        f'  {{ tenant = "team-a", sha256 = "{hash_key(KEY_A)}" }},\n'
        f'  {{ tenant = "team-b", sha256 = "{hash_key(KEY_B)}" }},\n'
        f'  {{ tenant = "team-q", sha256 = "{hash_key(KEY_Q)}", max_sandboxes = 3 }},\n'
        "]\n"
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "ROCK_ADMIN_STATE_DIR": str(state_dir), "ROCK_CONFIG": str(config)}
    env.pop("ROCK_BASE_URL", None)
    log = state_dir / "admin.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "rock.bench.scripted_admin", "--host", "127.0.0.1"]
            + ["--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None, log.read_text()[-3000:]
            time.sleep(0.1)
        else:
            pytest.fail(f"the scripted admin did not answer: {log.read_text()[-3000:]}")
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(state_dir, ignore_errors=True)


def _requests(url: str, route: str) -> float:
    """Requests of ``route`` the admin has answered, every outcome."""
    text = httpx.get(url + "/metrics", headers={"X-API-Key": KEY_A}).text
    pattern = (
        rf'^rock_http_requests_total{{[^}}]*route="{re.escape(PREFIX + route)}"[^}}]*}} (\S+)$'
    )
    return sum(float(m) for m in re.findall(pattern, text, re.MULTILINE))


def _mine(url: str, key: str) -> dict[str, str]:
    """The sandboxes ``key``'s tenant has: id -> state."""
    answer = httpx.get(
        url + PREFIX + "/sandboxes", params={"page_size": 500}, headers={"X-API-Key": key}
    )
    return {item["sandbox_id"]: item["state"] for item in answer.json()["result"]["items"]}


def _request(**fields: Any) -> SandboxStartRequest:
    return SandboxStartRequest(
        image=fields.pop("image", "scripted:1"),
        sandbox_id=fields.pop("sandbox_id", f"sb-{uuid.uuid4().hex[:12]}"),
        **fields,
    )


async def _start_together(driver: RemoteDriver, requests: list[SandboxStartRequest]) -> list[Any]:
    """``start_async`` of every request, asked in one turn; each one's answer or error."""
    try:
        return await asyncio.gather(
            *(driver.start_async(r, experiment_id="batch") for r in requests),
            return_exceptions=True,
        )
    finally:
        await driver.aclose()


def test_starts_asked_together_go_as_one_request_and_each_gets_its_own_sandbox(
    admin: str,
) -> None:
    batches, singles = _requests(admin, "/sandboxes/start_batch"), _requests(admin, "/start_async")
    requests = [_request() for _ in range(20)]
    driver = RemoteDriver(admin, api_key=KEY_A)
    answers = asyncio.run(_start_together(driver, requests))
    assert [a.sandbox_id for a in answers] == [r.sandbox_id for r in requests]
    assert _requests(admin, "/sandboxes/start_batch") == batches + 1
    assert _requests(admin, "/start_async") == singles
    mine = _mine(admin, KEY_A)
    assert {r.sandbox_id for r in requests} <= set(mine)
    status = httpx.get(
        admin + PREFIX + "/get_status",
        params={"sandbox_id": requests[0].sandbox_id},
        headers={"X-API-Key": KEY_A},
    ).json()["result"]
    assert status["experiment_id"] == "batch"  # each item's identity is recorded


def test_a_start_alone_in_its_turn_still_goes_as_start_async(admin: str) -> None:
    batches, singles = _requests(admin, "/sandboxes/start_batch"), _requests(admin, "/start_async")
    driver = RemoteDriver(admin, api_key=KEY_A)
    [answer] = asyncio.run(_start_together(driver, [_request()]))
    assert answer.sandbox_id is not None
    assert _requests(admin, "/start_async") == singles + 1
    assert _requests(admin, "/sandboxes/start_batch") == batches


def test_a_batch_past_the_tenants_quota_starts_what_fits_and_names_the_quota_for_the_rest(
    admin: str,
) -> None:
    requests = [_request() for _ in range(5)]
    driver = RemoteDriver(admin, api_key=KEY_Q)
    answers = asyncio.run(_start_together(driver, requests))
    started = [a for a in answers if not isinstance(a, BaseException)]
    refused = [a for a in answers if isinstance(a, BaseException)]
    assert len(started) == 3 and len(refused) == 2
    for error in refused:
        assert isinstance(error, QuotaExceeded)
        assert "tenant 'team-q': max_sandboxes 3 reached" in str(error)
        assert error.sandbox_id in {r.sandbox_id for r in requests[3:]}
    # Nothing was left behind for the refused ones: the tenant has the three it was answered.
    assert set(_mine(admin, KEY_Q)) == {a.sandbox_id for a in started}


def test_an_item_with_a_bad_image_name_is_refused_alone_naming_its_image(admin: str) -> None:
    good, bad, other = _request(), _request(image=IMAGE_ID), _request()
    driver = RemoteDriver(admin, api_key=KEY_A)
    answers = asyncio.run(_start_together(driver, [good, bad, other]))
    assert answers[0].sandbox_id == good.sandbox_id
    assert answers[2].sandbox_id == other.sandbox_id
    error = answers[1]
    assert isinstance(error, InvalidParameter), error
    assert IMAGE_ID in str(error) and "image" in str(error)
    assert error.sandbox_id == bad.sandbox_id
    mine = _mine(admin, KEY_A)
    assert good.sandbox_id in mine and other.sandbox_id in mine
    assert bad.sandbox_id not in mine


def test_a_malformed_item_is_named_by_its_field_and_the_others_start(admin: str) -> None:
    good = {"image": "scripted:1", "sandbox_id": f"sb-{uuid.uuid4().hex[:12]}"}
    answer = httpx.post(
        admin + PREFIX + "/sandboxes/start_batch",
        json={"items": [{"request": {**good}}, {"request": {"image": "x", "memory": "lots"}}]},
        headers={"X-API-Key": KEY_A},
    ).json()
    assert answer["status"] == "Success", answer
    first, second = answer["result"]["items"]
    assert first["sandbox"]["sandbox_id"] == good["sandbox_id"]
    assert second["sandbox"] is None and second["message"] == "invalid parameter"
    assert "memory" in second["error"] and second["rock_code"] == 4001, second


def test_another_tenants_id_in_a_batch_is_refused_as_taken_without_saying_whose(
    admin: str,
) -> None:
    theirs = _request()
    asyncio.run(_start_together(RemoteDriver(admin, api_key=KEY_A), [theirs]))
    mine = _request()
    answers = asyncio.run(
        _start_together(
            RemoteDriver(admin, api_key=KEY_B), [_request(sandbox_id=theirs.sandbox_id), mine]
        )
    )
    assert isinstance(answers[0], SandboxAlreadyExists)
    assert "is taken" in str(answers[0]) and "team-a" not in str(answers[0])
    assert answers[1].sandbox_id == mine.sandbox_id
    assert theirs.sandbox_id not in _mine(admin, KEY_B)


def test_a_batch_above_the_admins_batch_max_count_is_refused_naming_the_limit(
    admin: str,
) -> None:
    answer = httpx.post(
        admin + PREFIX + "/sandboxes/start_batch",
        json={"items": [{"request": {"image": "scripted:1"}}] * 2001},
        headers={"X-API-Key": KEY_A},
    ).json()
    assert answer["status"] == "Failed" and answer["message"] == "invalid parameter"
    assert "items: at most 2000 items, got 2001" in answer["error"]
