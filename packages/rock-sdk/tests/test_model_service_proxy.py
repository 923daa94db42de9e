"""The model service's ``proxy`` mode, run as its own process (``rock model-service serve --type
proxy``) in front of a local OpenAI-compatible test server whose failures are scripted: retryable
statuses, a status that is not retried, an upstream slower than the request timeout, streams.
Then ``--replay-file`` answers from what was recorded, with the upstream gone.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from rock_core.ports import listen_port


class Upstream:
    """A test inference server: each call takes the next scripted behaviour (``ok``, a status
    number, ``slow``), ``ok`` when the script is used up; ``seen`` holds each request body."""

    def __init__(self) -> None:
        self.script: list[Any] = []
        self.seen: list[dict[str, Any]] = []
        self.release = threading.Event()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                upstream.seen.append({"body": body, "auth": self.headers.get("Authorization")})
                step = upstream.script.pop(0) if upstream.script else "ok"
                if step == "slow":
                    upstream.release.wait(30)
                    step = "ok"
                if isinstance(step, int):
                    self._send(step, {"error": {"message": f"injected {step}"}})
                elif body.get("stream"):
                    self._stream(body)
                else:
                    self._send(200, answer(body))

            def _send(self, status: int, data: dict[str, Any]) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _stream(self, body: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                text = "you said " + body["messages"][-1]["content"]
                pieces = [{"role": "assistant", "content": ""}]
                pieces += [{"content": w} for w in text.split(" ") if w and not w.isspace()]
                for i, delta in enumerate(pieces):
                    if i > 1:
                        delta["content"] = " " + delta["content"]
                    self._chunk(
                        {
                            "id": "c1",
                            "model": body["model"],
                            "created": 1,
                            "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
                        }
                    )
                self._chunk(
                    {
                        "id": "c1",
                        "model": body["model"],
                        "created": 1,
                        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9},
                    }
                )
                self._raw(b"data: [DONE]\n\n")
                self._raw(b"")

            def _chunk(self, data: dict[str, Any]) -> None:
                self._raw(b"data: " + json.dumps(data).encode() + b"\n\n")

            def _raw(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(
            target=self.server.serve_forever,
            args=(0.05,),  # shutdown() waits one poll: a twentieth of a second, not half
            daemon=True,
        ).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def answer(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "c0",
        "object": "chat.completion",
        "created": 1,
        "model": body["model"],
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "content": "you said " + body["messages"][-1]["content"],
                },
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.close()


class Service:
    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process, self.url, self.log = process, f"http://127.0.0.1:{port}", log


def start_service(tmp_path: Path, *args: str) -> Service:
    port = listen_port()
    log = tmp_path / f"service-{port}.log"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rock.sdk.model",
            "model-service",
            "serve",
            "--type",
            "proxy",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *args,
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    for _ in range(400):
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
            return Service(process, port, log)
        except httpx.TransportError:
            if process.poll() is not None:
                break
            time.sleep(0.05)
    process.kill()
    raise AssertionError(f"the model service did not come up: {log.read_text()}")


@pytest.fixture
def services() -> Iterator[list[Service]]:
    started: list[Service] = []
    yield started
    for service in started:
        service.process.terminate()
        service.process.wait(10)


def chat(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": "policy", "messages": [{"role": "user", "content": content}], **extra}


def test_proxy_forwards_retries_times_out_streams_and_records_each_call(
    tmp_path: Path, upstream: Upstream, services: list[Service]
) -> None:
    traj = tmp_path / "traj.jsonl"
    service = start_service(
        tmp_path,
        "--proxy-base-url",
        upstream.url,
        "--retryable-status-codes",
        "429,503",
        "--request-timeout",
        "2",
        "--retry-attempts",
        "3",
        "--retry-backoff",
        "0.01",
        "--recording-file",
        str(traj),
    )
    services.append(service)
    http = httpx.Client(base_url=service.url, timeout=60)
    headers = {"Authorization": "Bearer sk-test"}

    # 1. Two retryable failures, then the answer: the agent sees only the answer.
    upstream.script = [429, 503]
    first = http.post("/v1/chat/completions", json=chat("one"), headers=headers)
    assert first.status_code == 200, first.text
    assert first.json()["choices"][0]["message"]["content"] == "you said one"
    assert len(upstream.seen) == 3 and upstream.seen[0]["auth"] == "Bearer sk-test"

    # 2. A status not in the list is passed on at once.
    upstream.script = [400]
    second = http.post("/v1/chat/completions", json=chat("two"))
    assert second.status_code == 400 and "injected 400" in second.text
    assert len(upstream.seen) == 4

    # 3. Retryable every time: the last answer is passed on after the attempts.
    upstream.script = [503, 503, 503]
    third = http.post("/v1/chat/completions", json=chat("three"))
    assert third.status_code == 503
    assert len(upstream.seen) == 7

    # 4. An upstream slower than the request timeout: 504.
    upstream.script = ["slow"]
    fourth = http.post("/v1/chat/completions", json=chat("four"))
    assert fourth.status_code == 504 and "timed out" in fourth.text
    upstream.release.set()

    # 5. A stream passed on chunk by chunk, aggregated for the trajectory.
    with http.stream("POST", "/v1/chat/completions", json=chat("five", stream=True)) as stream:
        assert stream.status_code == 200
        events = [line for line in stream.iter_lines() if line.startswith("data:")]
    assert events[-1] == "data: [DONE]" and len(events) > 3
    text = "".join(
        (json.loads(e[5:])["choices"][0]["delta"].get("content") or "") for e in events[:-1]
    )
    assert text == "you said five"

    lines = [json.loads(line) for line in traj.read_text().splitlines()]
    assert [line["status"] for line in lines] == [
        "success",
        "failure",
        "failure",
        "failure",
        "success",
    ]
    assert lines[0]["request"] == chat("one") and lines[0]["attempts"] == 3
    assert lines[0]["response"]["choices"][0]["message"]["content"] == "you said one"
    assert lines[0]["usage"] == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    assert lines[0]["response_time"] > 0
    assert lines[1]["error"] == "upstream_status=400" and lines[1]["attempts"] == 1
    assert lines[2]["attempts"] == 3
    assert lines[3]["error"] == "timeout" and lines[3]["response"] is None
    streamed = lines[4]
    assert streamed["stream"] is True
    assert streamed["response"]["object"] == "chat.completion"
    assert streamed["response"]["choices"][0]["message"] == {
        "role": "assistant",
        "content": "you said five",
    }
    assert streamed["response"]["choices"][0]["finish_reason"] == "stop"
    assert streamed["usage"]["total_tokens"] == 9


def test_replay_file_answers_from_the_recording_without_the_upstream(
    tmp_path: Path, upstream: Upstream, services: list[Service]
) -> None:
    traj = tmp_path / "traj.jsonl"
    recording = start_service(
        tmp_path, "--proxy-base-url", upstream.url, "--recording-file", str(traj)
    )
    services.append(recording)
    http = httpx.Client(timeout=60)
    for word in ("alpha", "beta"):
        assert http.post(f"{recording.url}/v1/chat/completions", json=chat(word)).status_code == 200
    upstream.close()

    replay = start_service(tmp_path, "--replay-file", str(traj))
    services.append(replay)
    got = http.post(f"{replay.url}/v1/chat/completions", json=chat("anything"))
    assert got.json()["choices"][0]["message"]["content"] == "you said alpha"
    with http.stream("POST", f"{replay.url}/v1/chat/completions", json=chat("x", stream=True)) as s:
        events = [line for line in s.iter_lines() if line.startswith("data:")]
    assert json.loads(events[0][5:])["choices"][0]["delta"]["content"] == "you said beta"
    assert events[-1] == "data: [DONE]"
    exhausted = http.post(f"{replay.url}/v1/chat/completions", json=chat("more"))
    assert exhausted.status_code == 404 and "exhausted" in exhausted.text


def test_recording_and_replay_together_are_refused_naming_both(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rock.sdk.model",
            "model-service",
            "start",
            "--type",
            "proxy",
            "--recording-file",
            "a.jsonl",
            "--replay-file",
            "b.jsonl",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "--replay-file" in result.stderr and "--recording-file" in result.stderr
