"""What a MoE layer keeps for its backward: memory.mlp_ratio against megatron-core.

tools/moe_activations.py builds megatron-core 0.16's MoELayer on the CPU (gloo world of one,
fused weighted SwiGLU) and counts the storages its forward saves; the estimate's bytes a token
(over the hidden size) must match within 5 %. Table 2's 4 f/h alone (a GeLU MLP's, without
the routed copies of the tokens) is under half of it here, which this test would catch.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support import ROOT

from miles_topology import Topology
from miles_topology.judging.memory import layout_of, mlp_ratio, shape_from_flags

pytest.importorskip("megatron.core")


@pytest.mark.parametrize("tokens,hidden,ffn,experts,topk", [(1024, 256, 128, 8, 2),
                                                            (512, 128, 256, 16, 4)])
def test_the_estimate_keeps_what_megatron_cores_moe_layer_saves(tokens, hidden, ffn, experts,
                                                                 topk):
    got = subprocess.run([sys.executable, str(ROOT / "tools" / "moe_activations.py"),
                          *map(str, (tokens, hidden, ffn, experts, topk))],
                         capture_output=True, text=True, timeout=300, check=True)
    measured = json.loads(got.stdout.strip().splitlines()[-1])["per_h"]
    flags = ["--num-layers", "1", "--hidden-size", str(hidden), "--num-attention-heads", "4",
             "--swiglu", "--num-experts", str(experts), "--moe-router-topk", str(topk),
             "--moe-ffn-hidden-size", str(ffn), "--vocab-size", "1000"]
    shape = shape_from_flags(flags)
    lay = layout_of(Topology(nodes=1, gpus_per_node=1, layers=1, heads=4, experts=experts,
                             topk=topk))
    modelled = mlp_ratio(shape, lay, True)
    assert modelled == pytest.approx(measured, rel=0.05)
    table2 = 4 * topk * ffn / hidden  # Table 2's share alone: far short of it
    assert abs(table2 - measured) > 0.4 * measured
