"""Group commit (runtime.groupcommit): batches of whatever queued meanwhile, one at a time, results routed."""

from __future__ import annotations

import threading

import pytest

from fakeplugin.runtime.groupcommit import GroupCommit


class Recorder:
    """A commit function that records its batches; the first one waits until released."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.first_started = threading.Event()
        self.release_first = threading.Event()
        self.running = 0
        self.overlapped = False
        self.fail_on: str | None = None

    def commit(self, items: list[str]) -> dict[str, str]:
        self.running += 1
        self.overlapped |= self.running > 1
        self.batches.append(list(items))
        if len(self.batches) == 1:
            self.first_started.set()
            assert self.release_first.wait(10)
        self.running -= 1
        if self.fail_on in items:
            raise RuntimeError(f"commit failed on {self.fail_on}")
        return {item: item.upper() for item in items}


def submit_all(group: GroupCommit[str, str], names: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}

    def one(name: str) -> None:
        try:
            out[name] = group.submit([name])[name]
        except RuntimeError as e:
            out[name] = e

    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for t in threads:
        t.start()
    return {"threads": threads, "out": out}


def test_what_queues_during_a_batch_is_committed_together_and_routed_back() -> None:
    rec = Recorder()
    group = GroupCommit(rec.commit)
    first = submit_all(group, ["a"])
    assert rec.first_started.wait(10)
    rest = submit_all(group, ["b", "c", "d", "e"])
    while len(group._queue) < 4:  # all four are waiting behind the running batch
        threading.Event().wait(0.01)
    rec.release_first.set()
    for t in first["threads"] + rest["threads"]:
        t.join(10)
    assert rec.batches[0] == ["a"]
    assert sorted(rec.batches[1]) == ["b", "c", "d", "e"] and len(rec.batches) == 2
    assert {**first["out"], **rest["out"]} == {"a": "A", "b": "B", "c": "C", "d": "D", "e": "E"}
    assert not rec.overlapped


def test_a_failed_batch_fails_its_submitters_only() -> None:
    rec = Recorder()
    rec.fail_on = "b"
    group = GroupCommit(rec.commit)
    first = submit_all(group, ["a"])
    assert rec.first_started.wait(10)
    second = submit_all(group, ["b", "c"])
    while len(group._queue) < 2:
        threading.Event().wait(0.01)
    rec.release_first.set()
    for t in first["threads"] + second["threads"]:
        t.join(10)
    assert first["out"] == {"a": "A"}
    assert {k: str(v) for k, v in second["out"].items()} == {
        "b": "commit failed on b",
        "c": "commit failed on b",
    }
    assert group.submit(["f"]) == {"f": "F"}  # and the group goes on


def test_many_threads_never_commit_at_once() -> None:
    rec = Recorder()
    rec.release_first.set()
    group = GroupCommit(rec.commit)
    names = [f"n{i}" for i in range(64)]
    run = submit_all(group, names)
    for t in run["threads"]:
        t.join(10)
    assert run["out"] == {n: n.upper() for n in names}
    assert sorted(i for batch in rec.batches for i in batch) == sorted(names)
    assert not rec.overlapped


def test_an_error_in_commit_reaches_the_leader_too() -> None:
    group: GroupCommit[str, str] = GroupCommit(lambda items: {}[items[0]])
    with pytest.raises(KeyError):
        group.submit(["x"])
