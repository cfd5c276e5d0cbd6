"""Stand-in torch: ``torch.cuda`` answers from the modelled cluster; the rest is Unknown.

``device_count()`` counts the GPUs of one node, or the ones ``CUDA_VISIBLE_DEVICES`` leaves
visible (as the CUDA runtime does); ROCm builds of torch answer through ``torch.cuda`` too.
"""

from __future__ import annotations

import os
import sys
import types

from .. import cluster as _cluster

# compute capability the driver reports (CUDA "sm_XY"; ROCm gfx942 -> (9, 4), gfx950 -> (9, 5))
CAPABILITY = {"A100": (8, 0), "H100": (9, 0), "H200": (9, 0), "H20": (9, 0), "B200": (10, 0),
              "GB200": (10, 0), "B300": (10, 3), "GB300": (10, 3), "MI300X": (9, 4),
              "MI325X": (9, 4), "MI350X": (9, 5), "MI355X": (9, 5)}


def _c() -> _cluster.ClusterModel:
    got = sys.modules[__package__].CLUSTER
    return got if got is not None else _cluster.ClusterModel.of({})


def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return _c().gpus_per_node
    n = 0
    for part in visible.split(","):  # the runtime stops at the first invalid entry
        if not part.strip().isdigit() or int(part) >= _c().gpus_per_node:
            break
        n += 1
    return n


def get_device_name(device=None) -> str:
    return _c().name


def get_device_capability(device=None) -> tuple[int, int]:
    from . import Unknown

    return CAPABILITY.get(_c().gpu.upper(), Unknown("the GPU's compute capability"))


def get_device_properties(device=None):
    c = _c()
    return types.SimpleNamespace(name=c.name, total_memory=c.spec[1] << 20,
                                 major=get_device_capability()[0],
                                 minor=get_device_capability()[1])


def mem_get_info(device=None) -> tuple[int, int]:
    total = _c().spec[1] << 20
    return total, total


def current_device() -> int:
    return 0


def _nothing(*args, **kwargs) -> None:
    return None


CUDA = {"is_available": is_available, "device_count": device_count,
        "get_device_name": get_device_name, "get_device_capability": get_device_capability,
        "get_device_properties": get_device_properties, "mem_get_info": mem_get_info,
        "current_device": current_device, "set_device": _nothing, "synchronize": _nothing,
        "empty_cache": _nothing}
ATTRS = {"torch.cuda": CUDA,
         "torch.distributed": {"is_initialized": lambda: False, "is_available": lambda: True}}
CHILDREN = {"torch": ["torch.cuda", "torch.distributed"]}


def overlay(module) -> None:
    """--real-imports: the installed torch, with torch.cuda answering from the model."""
    for name, value in CUDA.items():
        setattr(module.cuda, name, value)
