"""A small real agent, for tests and ``rock bench agents``: it asks its model "which command
next?", runs the command it is told in a shell, tells the model the output, and stops when told
``done`` (or after ``--max-steps``). With ``ROCK_AGENT_TIMINGS`` set to a file, it appends the
milliseconds of each model call there (``rock bench agents``). Standard library only; RockAgent installs it from this file.

    python3 shell_agent.py "the task" [--base-url http://127.0.0.1:8080/v1] [--max-steps 50]

The model is ``$OPENAI_BASE_URL`` (default the model service, ``http://127.0.0.1:8080/v1``);
each call is an OpenAI ``/chat/completions`` with the conversation so far. It exits 0 when told
``done``, 3 when the model service ends the session (a 5xx), 4 after ``--max-steps``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request


def ask(base_url: str, messages: list, model: str) -> str:
    body = json.dumps({"model": model, "messages": messages}).encode()
    req = urllib.request.Request(base_url.rstrip("/") + "/chat/completions", data=body)
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=3600) as answer:
        data = json.loads(answer.read())
    return data["choices"][0]["message"]["content"] or ""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("task")
    parser.add_argument(
        "--base-url", default=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1")
    )
    parser.add_argument("--model", default=os.environ.get("OPENAI_MODEL", "policy"))
    parser.add_argument("--max-steps", type=int, default=50)
    args = parser.parse_args()
    messages = [
        {"role": "system", "content": "Answer with one shell command, or 'done'."},
        {"role": "user", "content": args.task},
    ]
    timings = os.environ.get("ROCK_AGENT_TIMINGS")  # a file: each call's milliseconds
    for step in range(args.max_steps):
        try:
            began = time.perf_counter()
            command = ask(args.base_url, messages, args.model).strip()
            if timings:
                with open(timings, "a") as f:
                    f.write("%.3f\n" % ((time.perf_counter() - began) * 1000))
        except urllib.error.HTTPError as exc:
            print(f"agent: the model answered {exc.code}; stopping", flush=True)
            return 3
        messages.append({"role": "assistant", "content": command})
        if command == "done":
            print(f"agent: done after {step} commands", flush=True)
            return 0
        run = subprocess.run(command, shell=True, capture_output=True, text=True)
        output = run.stdout + run.stderr
        print(f"agent: $ {command} -> {run.returncode}", flush=True)
        messages.append({"role": "user", "content": f"exit {run.returncode}\n{output}"})
    return 4


if __name__ == "__main__":
    sys.exit(main())
