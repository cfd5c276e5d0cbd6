"""The GPUs the checker knows: the name a driver reports, memory, NVLink links, vendor.

The memory estimate (judging/memory.py) judges a launch against a GPU of this table, and the
sandbox's modelled cluster (pylaunch/cluster.py) answers a launcher's probes from it. The
sandbox's child loads this file by path: it imports nothing.
"""

# name as given -> (name the driver reports, memory MiB, NVLink links per GPU, vendor);
# GPUs per node when not given: miles' NUM_GPUS_OF_HARDWARE (GB200/GB300: 4 a tray)
GPUS = {
    "A100": ("NVIDIA A100-SXM4-80GB", 81920, 12, "nvidia"),
    "H100": ("NVIDIA H100 80GB HBM3", 81559, 18, "nvidia"),
    "H200": ("NVIDIA H200", 143771, 18, "nvidia"),
    "H20": ("NVIDIA H20", 97871, 18, "nvidia"),
    "B200": ("NVIDIA B200", 183359, 18, "nvidia"),
    "B300": ("NVIDIA B300 SXM6 AC", 275040, 18, "nvidia"),
    "GB200": ("NVIDIA GB200", 189471, 18, "nvidia"),
    "GB300": ("NVIDIA GB300", 284208, 18, "nvidia"),
    "MI300X": ("AMD Instinct MI300X OAM", 196592, 0, "amd"),
    "MI325X": ("AMD Instinct MI325X OAM", 262128, 0, "amd"),
    "MI350X": ("AMD Instinct MI350X", 294896, 0, "amd"),
    "MI355X": ("AMD Instinct MI355X", 294896, 0, "amd"),
}
PER_NODE = {"GB200": 4, "GB300": 4}
DEFAULTS = {"nodes": 1, "gpus_per_node": 8, "gpu": "H100", "nvlink": True}
