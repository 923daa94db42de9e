"""The event stream's parts a start and the runtime's watch stand on: a job's watch wakes its
start when the stream tells of the job, and a subscriber hears only the events it wants."""

from __future__ import annotations

import asyncio
import json

from rock_nomad._events import EventFeed, JobWatch


def test_a_watch_returns_news_told_before_or_while_it_waits_and_silence_as_none():
    async def scenario() -> list[bool]:
        watch = JobWatch("rock-a")
        said: list[bool] = [await watch.changed(0.01)]  # nothing told: silence
        watch.update("Evaluation", {"ID": "e1", "ModifyIndex": 5})
        said.append(await watch.changed(30))  # told before: at once
        said.append(await watch.changed(0.01))  # and only once
        waiting = asyncio.ensure_future(watch.changed(30))
        await asyncio.sleep(0)
        watch.update("Allocation", {"ID": "a1", "ModifyIndex": 6})
        said.append(await waiting)  # told while waiting: wakes it
        watch.update("Allocation", {"ID": "a1", "ModifyIndex": 4})  # older than what it knows
        said.append(await watch.changed(0.01))
        assert watch.allocs["a1"]["ModifyIndex"] == 6
        return said

    assert asyncio.run(scenario()) == [False, True, False, True, False]


def test_a_watch_waiting_until_a_state_is_woken_by_that_state_only_and_polls_after_silence():
    async def scenario() -> tuple[list[bool], list[int], float, float]:
        loop = asyncio.get_running_loop()
        watch = JobWatch("rock-a")
        woken: list[int] = []

        def running() -> bool:
            woken.append(len(watch.allocs))
            alloc = watch.allocs.get("a1")
            return alloc is not None and alloc.get("ClientStatus") == "running"

        waiting = asyncio.ensure_future(watch.changed(30, running))
        await asyncio.sleep(0)
        watch.update("Evaluation", {"ID": "e1", "Status": "complete", "ModifyIndex": 1})
        watch.update("Allocation", {"ID": "a1", "ClientStatus": "pending", "ModifyIndex": 2})
        await asyncio.sleep(0)
        said = [waiting.done()]  # news of the job, but not the state waited for: still waiting
        watch.update("Allocation", {"ID": "a1", "ClientStatus": "running", "ModifyIndex": 3})
        said.append(await waiting)
        said.append(await watch.changed(30, running))  # true already: at once
        # Silence is counted from the last news, not from the start of the wait.
        begun = loop.time()
        waiting = asyncio.ensure_future(watch.changed(0.2, lambda: False))
        await asyncio.sleep(0.15)
        watch.update("Allocation", {"ID": "a2", "ClientStatus": "pending", "ModifyIndex": 4})
        news = loop.time()
        said.append(await waiting)  # silence: the caller reads Nomad itself
        return said, woken, news - begun, loop.time() - news

    said, woken, before, after = asyncio.run(scenario())
    assert said == [False, True, True, False]
    assert woken == [0, 0, 1, 1, 1]  # asked at the start, at each news, at the next start
    assert before >= 0.15 and after >= 0.19


def test_a_subscriber_hears_only_the_events_it_wants():
    async def scenario() -> tuple[list[str], list[str]]:
        feed = EventFeed(api=None)  # type: ignore[arg-type] # frames are fed by hand
        every = feed.subscribe()
        ends = feed.subscribe(lambda topic, kind, obj: obj.get("ClientStatus") == "complete")
        frame = {
            "Index": 9,
            "Events": [
                {"Topic": "Job", "Type": "JobRegistered", "Payload": {"Job": {"ID": "j"}}},
                {
                    "Topic": "Allocation",
                    "Type": "AllocationUpdated",
                    "Payload": {
                        "Allocation": {"ID": "a1", "JobID": "j", "ClientStatus": "running"}
                    },
                },
                {
                    "Topic": "Allocation",
                    "Type": "AllocationUpdated",
                    "Payload": {
                        "Allocation": {"ID": "a2", "JobID": "j", "ClientStatus": "complete"}
                    },
                },
            ],
        }
        feed._frame(json.dumps(frame))
        heard_all = [every.get_nowait()[1] for _ in range(every.qsize())]
        heard_ends = [ends.get_nowait()[2]["ID"] for _ in range(ends.qsize())]
        return heard_all, heard_ends

    heard_all, heard_ends = asyncio.run(scenario())
    assert heard_all == ["JobRegistered", "AllocationUpdated", "AllocationUpdated"]
    assert heard_ends == ["a2"]


def _nomad_line(index: int, *events: tuple[str, str, dict[str, object]]) -> str:
    """A frame as Nomad writes it: compact, each event's Topic and Type first."""
    return json.dumps(
        {
            "Index": index,
            "Events": [
                {"Topic": topic, "Type": kind, "Key": obj["ID"], "Payload": {topic: obj}}
                for topic, kind, obj in events
            ],
        },
        separators=(",", ":"),
    )


def test_frames_of_job_registrations_only_are_not_decoded_while_no_one_wants_them():
    job = {"ID": "rock-j", "TaskGroups": [{"Name": "sandbox"}]}
    registered = _nomad_line(20, ("Job", "JobRegistered", job))
    # A "Topic" key inside the job: not told apart from an event's, so the frame is decoded.
    odd = _nomad_line(20, ("Job", "JobRegistered", {**job, "Meta": {"Topic": "Job"}}))
    mixed = _nomad_line(
        21,
        ("Job", "JobRegistered", job),
        ("Evaluation", "EvaluationUpdated", {"ID": "e1", "JobID": "rock-j", "Status": "pending"}),
    )
    stopped = _nomad_line(22, ("Job", "JobDeregistered", job))

    async def scenario() -> tuple[list[str], list[str], int, int, dict[str, object]]:
        feed = EventFeed(api=None)  # type: ignore[arg-type] # frames are fed by hand
        watch_like = feed.subscribe(lambda t, k, o: k == "JobDeregistered", registrations=False)
        with feed.watch("rock-j") as watch:
            for line in (registered, odd, mixed, stopped):
                feed._frame(line)
            evals = dict(watch.evals)
        skipped_alone, index_alone = feed.skipped, feed._index
        heard = [watch_like.get_nowait()[1] for _ in range(watch_like.qsize())]
        every = feed.subscribe()  # wants registrations too: no frame is skipped any more
        feed._frame(_nomad_line(23, ("Job", "JobRegistered", job)))
        told = [every.get_nowait()[1] for _ in range(every.qsize())]
        assert (feed.skipped, feed._index) == (1, 23)
        return heard, told, skipped_alone, index_alone, evals

    heard, told, skipped, index, evals = asyncio.run(scenario())
    assert skipped == 1 and index == 22  # the registration's frame alone, its index kept
    assert heard == ["JobDeregistered"]
    assert told == ["JobRegistered"]
    assert list(evals) == ["e1"]  # a frame with another event in it is decoded


def test_a_watched_or_tracked_allocation_is_kept_with_only_what_the_runtime_reads():
    ports = [{"Label": "rocklet", "Value": 23456, "To": 22555, "HostIP": "192.0.2.7"}]
    alloc = {
        "ID": "a1",
        "JobID": "rock-j",
        "EvalID": "e1",
        "NodeName": "node-1",
        "ClientStatus": "running",
        "DesiredStatus": "run",
        "TaskStates": {"rocklet": {"State": "running", "Events": [{"Type": "Started"}]}},
        "CreateIndex": 8,
        "ModifyIndex": 12,
        "AllocatedResources": {"Shared": {"Ports": ports, "Networks": [{"Mode": "host"}]}},
        "Metrics": {"NodesEvaluated": 50, "ScoreMetaData": [{"NodeID": "n"}]},
        "Resources": {"CPU": 100, "MemoryMB": 128},
    }

    async def scenario() -> tuple[dict[str, object], dict[str, object], dict[str, object]]:
        feed = EventFeed(api=None)  # type: ignore[arg-type] # frames are fed by hand
        everything = feed.subscribe()
        feed.track("rock-j")
        with feed.watch("rock-j") as watch:
            feed._frame(_nomad_line(12, ("Allocation", "AllocationUpdated", alloc)))
            held = watch.allocs["a1"]
        return held, feed.latest["rock-j"], everything.get_nowait()[2]

    held, latest, told = asyncio.run(scenario())
    kept = {
        k: v for k, v in alloc.items() if k not in ("AllocatedResources", "Metrics", "Resources")
    }
    assert held == latest == {**kept, "AllocatedResources": {"Shared": {"Ports": ports}}}
    assert told == alloc  # a subscriber hears the whole allocation
