"""Stand-in Ray: the modelled cluster, with remote functions and actors run inline.

As Ray's local mode does, ``f.remote(...)`` runs ``f`` at once in this process and ``ray.get``
returns its result (an exception it raised is raised by ``get``, as RayTaskError is). A task
pinned to a node (``NodeAffinitySchedulingStrategy``, miles'
``exec_command_multi_node`` in miles/utils/external_utils/exec_command.py) runs with that
node as the cluster's current one, so the command it starts is recorded once per node and a
hostname or IP probe answers that node's. ``ray.init``, ``ray.nodes()``,
``ray.cluster_resources()`` answer from the model; the CPUs and memory of a node are not in
it and are Unknown.
"""

from __future__ import annotations

import shlex
import sys
import types

from .. import cluster as _cluster
from . import Unknown

_state = {"up": False}


def _c() -> _cluster.ClusterModel:
    got = sys.modules[__package__].CLUSTER
    return got if got is not None else _cluster.ClusterModel.of({})


def node_id(i: int) -> str:
    return f"{i + 1:056x}"


def _node_of(strategy) -> int | None:
    nid = getattr(strategy, "node_id", None)
    for i in range(_c().nodes):
        if nid == node_id(i):
            return i
    return None


# ---------------------------------------------------------------- cluster state


def init(address=None, *args, **kwargs):
    _state["up"] = True
    return Unknown("ray.init(...)")


def is_initialized() -> bool:
    return _state["up"]


def shutdown(*args, **kwargs) -> None:
    _state["up"] = False


def _resources(i: int) -> dict:
    c = _c()
    return {"GPU": float(c.gpus_per_node), "CPU": Unknown("a node's CPU count"),
            "memory": Unknown("a node's memory"), f"node:{c.ip(i)}": 1.0,
            **({"node:__internal_head__": 1.0} if i == 0 else {})}


def nodes() -> list[dict]:
    c = _c()
    return [{"NodeID": node_id(i), "Alive": True, "NodeManagerAddress": c.ip(i),
             "NodeManagerHostname": c.hostname(i), "NodeName": c.ip(i),
             "NodeManagerPort": 43000, "ObjectManagerPort": 43001,
             "Resources": _resources(i), "alive": True} for i in range(c.nodes)]


def cluster_resources() -> dict:
    c = _c()
    out = {"GPU": float(c.nodes * c.gpus_per_node), "CPU": Unknown("the cluster's CPU count"),
           "memory": Unknown("the cluster's memory"), "node:__internal_head__": 1.0}
    out.update({f"node:{c.ip(i)}": 1.0 for i in range(c.nodes)})
    return out


available_resources = cluster_resources


def get_node_ip_address(*args, **kwargs) -> str:
    c = _c()
    return c.ip(c.current)


class _Context:
    def get_node_id(self):
        return node_id(_c().current)

    def __getattr__(self, name):
        return Unknown(f"ray.get_runtime_context().{name}")


def get_runtime_context():
    return _Context()


# ---------------------------------------------------------------- tasks and actors


class ObjectRef:
    def __init__(self, value=None, error: BaseException | None = None):
        self.value, self.error = value, error

    def result(self):
        if self.error is not None:
            raise self.error
        return self.value


def _run(fn, node: int | None, args, kwargs) -> ObjectRef:
    c = _c()
    before = (c.current, c.remote)
    if node is not None:
        c.current = node
    c.remote = True
    try:
        return ObjectRef(fn(*args, **kwargs))
    except Exception as e:  # noqa: BLE001 - raised by ray.get, as Ray does
        return ObjectRef(error=e)
    finally:
        c.current, c.remote = before


def _strategy(options: dict):
    return options.get("scheduling_strategy")


class RemoteFunction:
    def __init__(self, fn, options=None):
        self._fn, self._options = fn, dict(options or {})

    def options(self, **kwargs):
        return RemoteFunction(self._fn, {**self._options, **kwargs})

    def remote(self, *args, **kwargs):
        return _run(self._fn, _node_of(_strategy(self._options)), args, kwargs)

    def __call__(self, *args, **kwargs):
        raise TypeError("Remote functions cannot be called directly; use .remote()")


class _Method:
    def __init__(self, bound, node):
        self._bound, self._node = bound, node

    def remote(self, *args, **kwargs):
        return _run(self._bound, self._node, args, kwargs)

    def options(self, **kwargs):
        return self


class ActorHandle:
    def __init__(self, instance, node):
        self._instance, self._node = instance, node

    def __getattr__(self, name):
        return _Method(getattr(self._instance, name), self._node)


class ActorClass:
    def __init__(self, cls, options=None):
        self._cls, self._options = cls, dict(options or {})

    def options(self, **kwargs):
        return ActorClass(self._cls, {**self._options, **kwargs})

    def remote(self, *args, **kwargs):
        node = _node_of(_strategy(self._options))
        return ActorHandle(_run(self._cls, node, args, kwargs).result(), node)


def remote(*args, **kwargs):
    """@ray.remote, @ray.remote(num_gpus=1), for functions and classes."""
    def wrap(target):
        return ActorClass(target, kwargs) if isinstance(target, type) else \
            RemoteFunction(target, kwargs)

    if len(args) == 1 and not kwargs and callable(args[0]):
        return wrap(args[0])
    return wrap


def get(refs, *args, **kwargs):
    if isinstance(refs, (list, tuple)):
        return [get(r) for r in refs]
    return refs.result() if isinstance(refs, ObjectRef) else refs


def wait(refs, *args, num_returns=1, **kwargs):
    refs = list(refs)
    return refs[:num_returns], refs[num_returns:]


def put(value, *args, **kwargs):
    return ObjectRef(value)


def kill(*args, **kwargs) -> None:
    pass


# ---------------------------------------------------------------- ray.util and friends


class NodeAffinitySchedulingStrategy:
    def __init__(self, node_id, soft=False, *args, **kwargs):
        self.node_id, self.soft = node_id, soft


class PlacementGroupSchedulingStrategy:
    def __init__(self, placement_group=None, placement_group_bundle_index=-1, *args, **kwargs):
        self.placement_group = placement_group
        self.placement_group_bundle_index = placement_group_bundle_index


class PlacementGroup:
    def __init__(self, bundles, strategy="PACK"):
        self.bundle_specs, self.strategy = list(bundles), strategy

    def ready(self):
        return ObjectRef(self)

    def wait(self, *args, **kwargs):
        return True


def placement_group(bundles, strategy="PACK", *args, **kwargs):
    return PlacementGroup(bundles, strategy)


def remove_placement_group(*args, **kwargs) -> None:
    pass


class JobSubmissionClient:
    """Submitting a job through Ray's Python API is a launch as `ray job submit` is."""

    def __init__(self, address=None, *args, **kwargs):
        self.address = address

    def submit_job(self, *args, entrypoint: str = "", runtime_env=None, **kwargs):
        import json

        env = f"--runtime-env-json={shlex.quote(json.dumps(runtime_env))} " \
            if runtime_env is not None else ""
        sys.modules[__package__].record_launch(f"ray job submit {env}-- {entrypoint}")
        return Unknown("a submitted job's id")

    def __getattr__(self, name):
        return Unknown(f"JobSubmissionClient.{name}")


_TOP = {name: globals()[name] for name in (
    "init", "is_initialized", "shutdown", "nodes", "cluster_resources", "available_resources",
    "get_runtime_context", "remote", "get", "wait", "put", "kill", "ObjectRef")}
_UTIL = {"placement_group": placement_group, "remove_placement_group": remove_placement_group,
         "PlacementGroup": PlacementGroup, "get_node_ip_address": get_node_ip_address}
ATTRS = {
    "ray": _TOP,
    "ray.util": _UTIL,
    "ray.util.placement_group": _UTIL,
    "ray.util.scheduling_strategies": {
        "NodeAffinitySchedulingStrategy": NodeAffinitySchedulingStrategy,
        "PlacementGroupSchedulingStrategy": PlacementGroupSchedulingStrategy},
    "ray._private.services": {"get_node_ip_address": get_node_ip_address},
    "ray.job_submission": {"JobSubmissionClient": JobSubmissionClient},
}
CHILDREN = {"ray": ["ray.util", "ray._private"], "ray._private": ["ray._private.services"]}


def overlay(module) -> None:
    """--real-imports: the installed Ray with its cluster and task calls answered as above
    (there is no Ray cluster in the sandbox, and a task must not start a worker)."""
    for name, value in _TOP.items():
        if name != "ObjectRef":
            setattr(module, name, value)
    for path, attrs in (("util", {"get_node_ip_address": get_node_ip_address}),
                        ("_private.services", {"get_node_ip_address": get_node_ip_address})):
        target = module
        for part in path.split("."):
            target = getattr(target, part, None)
        if isinstance(target, types.ModuleType):
            for name, value in attrs.items():
                setattr(target, name, value)
