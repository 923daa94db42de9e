"""The rocklet: rock's agent inside a sandbox.

Standard library only, Python 3.8 or newer, shipped as one zipapp (:func:`build_zipapp`) that a
runtime puts into the container and starts with the image's own ``python3``::

    python3 rocklet.pyz --host 0.0.0.0 --port 22555

It speaks ROCK's rocklet HTTP API (reference §3.1): answers are bare JSON with ROCK's field
names, and an uncaught error is HTTP 511 ``{"rockletexception": {message, class_path,
traceback, extra_info}}`` with ROCK's ``class_path`` names (``rock.rocklet.exceptions.
SessionDoesNotExistError``, ...). A malformed request is HTTP 400 ``{"detail": ...}``. No request
is cut off at 85 s: a command runs as long as its own ``timeout`` says.

ROCK's endpoints
    ``GET /``, ``GET /is_alive``, ``GET /get_statistics``, ``POST /create_session``,
    ``/run_in_session``, ``/close_session``, ``/execute``, ``/read_file``, ``/write_file``,
    ``/upload`` (multipart ``file``, ``target_path``, ``unzip``), ``/close``.

rock's extras
    ``POST /interrupt_session {session}``
        Ctrl-C the command running in a session (again, then SIGKILL to the terminal's
        foreground group if it resists); the session stays usable. Answers
        ``{session_type, interrupted, output, exit_code}``.
    ``POST /execute_stream`` (same body as ``/execute``)
        Chunked NDJSON while the command runs: ``{"type": "start", "pid"}``, then
        ``{"type": "output", "stream": "stdout"|"stderr", "data"}`` ..., then ``{"type":
        "exit", "exit_code", "signal", "timed_out", "wall_time", "cpu_time", "max_rss_bytes"}``.
    ``/execute`` answers carry ``wall_time`` and ``cpu_time`` (seconds) and ``max_rss_bytes``.
    ``POST /processes {command, shell?, cwd?, env?, timeout?}`` → ``{process_id, pid}``
        A background command; a string runs through ``/bin/sh -c`` unless ``shell`` is false.
    ``GET /processes`` → ``{processes: [...]}``
    ``GET /processes/{id}?wait=S&tail=N``
        ``{process_id, pid, command, running, exit_code, signal, timed_out, started_at,
        wall_time, cpu_time, max_rss_bytes, output_size, output_tail}``, waiting up to S
        seconds for the process to end. ``exit_code`` is the real one (``-N`` and
        ``signal: N`` when killed by signal N).
    ``GET /processes/{id}/output?offset=N&limit=M``
        Raw output bytes from ``offset`` (negative: from the end); headers
        ``x-rock-output-size``, ``x-rock-next-offset``, ``x-rock-running``.
    ``POST /processes/{id}/kill {signal?: 15|"TERM", group?: true, wait?: S}``
    ``POST /download {path}`` (or ``GET /download?path=``) → the file's raw bytes.
    ``POST /list_dir {path}`` → ``{path, entries: [{name, type, size, mode, mtime, target?}]}``.
    ``POST /warm_up`` → ``{warm: true}``
        Load and warm up the endpoints now (a fresh rocklet answers ``GET /is_alive`` from its
        lean front, :mod:`.front`, and loads the rest at its first real request); a warm pool
        sends it before a member can be claimed.
    ``POST /env/{make,reset,step,close,list,batch}``, ``GET /env``
        GEM environments, each in a process of its own forked from a worker ``python3`` with
        the image's site-packages; see :mod:`.envs`.

Sessions (reference §3.2) keep ROCK's semantics (``check`` = raise/silent/ignore, ``expect``,
``env``/``env_enable``, ``startup_source``, ``remote_user``, syntax errors as
``BashIncorrectSyntaxError``) with one write and one read per command; see :mod:`.sessions`.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "build_zipapp"]


def __getattr__(name: str) -> object:
    # build_zipapp runs on the host only: importing it lazily keeps the rocklet's start fast.
    if name == "build_zipapp":
        from .zipapp import build_zipapp

        return build_zipapp
    raise AttributeError(name)
