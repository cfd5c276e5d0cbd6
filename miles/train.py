"""`python -m miles.train` (also `miles-train`): validate the Topology, then place and run.

Validation runs before torch, ray or megatron-core are imported, so a bad configuration
is refused in well under a second with every problem listed. Exit codes: 0 done (or a
dry run), 1 invalid configuration (or a cluster that cannot host it), 2 unreadable input
or usage error, 3 the job ran but train and rollout disagreed, 4 a process of the job died
(the line names it: rank r, engine e or the host of node n, how it ended, and the phase),
130 interrupted (Ctrl-C), 143 terminated (SIGTERM). Bad input, an interrupt or a dead
process never ends in a traceback, and the job's processes and Ray's session folders are
gone when the launcher exits (`miles.ray.reap`).

Job flags owned here: --dry-run, --steps N, --seed N, --metrics-out FILE.jsonl, and
--topology FILE.yaml (read with the other topology flags). Topology flags build the
Topology; every other flag passes through to the backend untouched.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from miles_topology import Problem, Topology, TopologyError
from miles_topology.model.errors import InputError
from miles_topology.reading.sources import read_flags
from miles_topology.reporting.show import header

from .defaults import with_defaults

USAGE = """\
usage: python -m miles.train [--dry-run] [--steps N] [--seed N] [--metrics-out FILE.jsonl]
                             [--topology FILE.yaml] [miles / Megatron / SGLang flags ...]

With no flags it runs the embedded miniature R3 job: 2 nodes x 4 logical GPUs, EP 2,
colocated rollout. --dry-run prints the plan (grid, GPU map, engines, weight-sync groups)
and starts nothing. Exit codes: 0 ok, 1 invalid configuration, 2 unreadable input/usage,
3 the job ran but train and rollout disagreed (R3 not exact), 4 a process of the job
died, 130 interrupted."""


# The reference backend's own flags (miles/backend/job.py `options`, which reads them from
# the passthrough): not miles' surface, so not unknown flags here.
BACKEND_FLAGS = ("--fault", "--no-replay", "--sync-skew-s", "--prompts")


class UsageError(Exception):
    pass


@dataclass
class Job:
    dry_run: bool = False
    steps: int = 2
    seed: int = 0
    metrics_out: str | None = None
    help: bool = False


def split_job_flags(argv: list[str]) -> tuple[Job, list[str]]:
    """Take the launcher's own flags out of argv; the rest is for the Topology and backends."""
    job, rest, i = Job(), [], 0
    while i < len(argv):
        tok = argv[i]
        name, eq, inline = tok.partition("=")
        i += 1
        if name in ("-h", "--help"):
            job.help = True
        elif name == "--dry-run":
            if eq:
                raise UsageError("--dry-run takes no value")
            job.dry_run = True
        elif name in ("--steps", "--seed", "--metrics-out"):
            if eq:
                value = inline
            elif i < len(argv) and not argv[i].startswith("--"):
                value, i = argv[i], i + 1
            else:
                raise UsageError(f"{name} needs a value")
            _set(job, name, value)
        else:
            rest.append(tok)
    return job, rest


def _set(job: Job, name: str, value: str) -> None:
    if name == "--metrics-out":
        parent = os.path.dirname(os.path.abspath(value))
        if not os.path.isdir(parent):
            raise UsageError(f"--metrics-out {value}: directory {parent} does not exist")
        job.metrics_out = value
        return
    try:
        n = int(value)
    except ValueError:
        raise UsageError(f"{name} got {value!r}; it must be a whole number") from None
    if name == "--steps":
        if n < 0:
            raise UsageError(f"--steps got {n}; it must be 0 or more")
        job.steps = n
    else:
        job.seed = n


def report(problems: list[Problem] | tuple[Problem, ...], warnings=()) -> None:
    """Every problem with its code, the arithmetic, the fix and the flags involved."""
    n = len(problems)
    err = sys.stderr
    if n:
        print(f"miles: invalid configuration, {n} problem{'s' if n != 1 else ''}:", file=err)
    for kind, items in (("error", problems), ("warning", warnings)):
        for p in items:
            for line in p.lines(kind if kind == "error" else None):  # warning or skipped
                print(f"  {line}", file=err)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        job, rest = split_job_flags(argv)
    except UsageError as e:
        print(f"{USAGE}\n\nmiles: {e}", file=sys.stderr)
        return 2
    if job.help:
        print(USAGE)
        return 0
    try:
        full, added = with_defaults(rest)
        read = read_flags(full, own=BACKEND_FLAGS)
    except TopologyError as e:
        report(e.problems, e.warnings)
        return 1
    except InputError as e:
        print(f"miles: {e}", file=sys.stderr)
        return 2
    topo = read.topology
    if job.dry_run:
        from .plan import plan_text

        print(plan_text(topo, added))
        return 0
    if topo.warnings:
        report([], topo.warnings)
    print("topology: " + "; ".join(header(topo).splitlines()), file=sys.stderr)
    return run(topo, job, read.passthrough)


def run(topo: Topology, job: Job, passthrough: list[str]) -> int:
    """Start the cluster the Topology needs and hand it to the backend; always clean up:
    an interrupt or a dead process of the job ends in one line and nothing left running."""
    import importlib.util

    try:
        found = importlib.util.find_spec("miles.backend") is not None
    except ImportError:
        found = False
    backend = None
    if found:
        import miles.backend as backend
    if backend is None or not hasattr(backend, "run_job"):
        print(
            "miles: the job backend (miles.backend.run_job, the reference CPU R3 backend) is "
            "not available in this install, so nothing can run yet. The configuration is "
            "valid; `python -m miles.train --dry-run ...` prints its plan.",
            file=sys.stderr,
        )
        return 2
    import signal

    from .ray.reap import Scope
    from .startup import Phases, mark

    phases, scope = Phases(), None

    def ending(signum: int) -> tuple[int, str] | None:
        if signum == signal.SIGINT:
            return 130, f"miles: interrupted during {phases.current}"
        if signum == signal.SIGTERM:
            return 143, f"miles: terminated (SIGTERM) during {phases.current}"
        return None

    handlers = signal.signal(signal.SIGTERM, _terminated), signal.getsignal(signal.SIGINT)
    try:
        scope = Scope(own_tmp=not os.environ.get("RAY_ADDRESS"))
        scope.watch(ending)
        code, line = _run(backend, topo, job, passthrough, phases)
    except KeyboardInterrupt:
        code, line = ending(signal.SIGINT)
    except Terminated:
        code, line = ending(signal.SIGTERM)
    finally:  # a second Ctrl-C must not cut the clean-up short (it is bounded)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        left = scope.close() if scope else []
    if left:  # what Ray's own shutdown left behind
        mark(f"swept {len(left)}: {' '.join(sorted(left))}")
    if scope:
        scope.finish(line)
        signal.set_wakeup_fd(-1)
    elif line:
        print(line, file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, handlers[0])
    signal.signal(signal.SIGINT, handlers[1])
    return code


class Terminated(BaseException):
    """SIGTERM, raised like KeyboardInterrupt (not an Exception: no handler of a job error
    may take it for one) so the job unwinds and cleans up."""


def _terminated(*_) -> None:
    raise Terminated


def _run(backend, topo: Topology, job: Job, passthrough: list[str], phases) -> tuple[int, str]:
    """The job itself: (exit code, the line to end with, if any)."""
    import signal

    from miles.backend.exits import Died

    from .ray import PlacementTimeout, start_cluster

    try:
        cluster = start_cluster(topo)
    except TopologyError as e:
        report(e.problems)
        return 1, ""
    except PlacementTimeout as e:
        return 1, f"miles: {e}"
    # set again after start_cluster: Ray's local nodes install their own SIGTERM handler
    signal.signal(signal.SIGTERM, _terminated)
    phases("cluster")
    try:
        steps = backend.run_job(
            topo, cluster, steps=job.steps, metrics_out=job.metrics_out, seed=job.seed,
            extra=passthrough, phases=phases,
        )
    except Died as e:
        return 4, f"miles: {e} during {phases.current}; the job stopped"
    except Exception as e:  # a guard in a worker stopped the job (Ray wraps its error)
        cause = getattr(e, "cause", None) or e
        return 3, f"miles: the job stopped: {type(cause).__name__}: {cause}"
    finally:
        cluster.shutdown()
    from miles.backend.metrics import failures

    bad = {("final" if m["final"] else m["step"]): failures(m) for m in steps if failures(m)}
    if bad:
        what = "; ".join(f"{k}: {', '.join(v)}" for k, v in bad.items())
        return 3, f"miles: train and rollout disagree ({what}): R3 is not exact"
    return 0, ""


if __name__ == "__main__":
    code = main()
    if "ray" in sys.modules:  # the job ran and cleaned up; Ray's C++ core, torn down under
        sys.stdout.flush()  # it by an interrupt, can crash in interpreter finalisation
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
