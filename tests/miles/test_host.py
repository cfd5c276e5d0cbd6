"""A host's table of role processes under concurrent start and stop: a job that fails while
its other ranks are still being forked must leave no process behind (the race seen as
"dictionary changed size during iteration" in Host.stop, and as a rank outliving its job)."""

import multiprocessing as mp
import threading

import pytest

pytest.importorskip("ray")

from miles.backend import workers  # noqa: E402


class FakeProcess:
    """A role process that answers its start at once (no fork): what stop must kill."""

    made: list = []

    def __init__(self, target=None, name=None, args=()):
        self.name, self.conn, self.killed, self.exitcode, self.pid = name, args[0], 0, None, 1
        FakeProcess.made.append(self)

    def start(self):
        self.conn.send(("ok", {"pid": self.pid}))

    def kill(self):
        self.killed += 1

    def join(self, timeout=None):
        pass


class FakeContext:
    Process = FakeProcess

    @staticmethod
    def Pipe():
        return mp.Pipe()


def _host():
    host = workers.Host.__ray_actor_class__()
    host.ctx = FakeContext
    FakeProcess.made = []
    return host


def test_a_process_started_after_stop_is_killed():
    host = _host()
    assert host.start("rank0", "train", {}, {}) == {"pid": 1}
    host.stop()
    with pytest.raises(workers.ProcError, match="while its host was stopping"):
        host.start("rank1", "train", {}, {})
    assert [p.killed > 0 for p in FakeProcess.made] == [True, True]
    assert host.pids() == {}


def test_the_next_job_on_a_kept_host_starts_again():
    """A Pool's host serves job after job: after one job's stop, the next job's open()
    takes starts again (without it every later job's ranks would be refused)."""
    host = _host()
    host.start("rank0", "train", {}, {})
    host.stop()
    host.open()
    assert host.start("rank0", "train", {}, {}) == {"pid": 1}
    assert host.pids() == {"rank0": 1}
    host.stop()


def test_stop_while_ranks_are_still_starting_leaves_none_alive():
    host = _host()
    go = threading.Barrier(9)
    errors = []

    def start(i):
        go.wait()
        for k in range(50):
            try:
                host.start(f"rank{i}-{k}", "train", {}, {})
            except workers.ProcError:
                pass
            except Exception as e:  # noqa: BLE001 - any other error is the race
                errors.append(e)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    go.wait()
    try:
        host.stop()
    except Exception as e:  # noqa: BLE001
        errors.append(e)
    for t in threads:
        t.join()
    host.stop()  # whatever started before the flag was seen is in the table: stopped too
    assert errors == []
    assert all(p.killed for p in FakeProcess.made), sum(not p.killed for p in FakeProcess.made)
