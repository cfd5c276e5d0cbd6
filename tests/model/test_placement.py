"""Placement follows miles' one packed placement group: the model, `show` and the Ray bundles."""

from miles.ray.cluster import _ranks_on_node
from miles.ray.plan import need_per_node, slots
from miles_topology import Topology
from miles_topology.reporting.show import text_map

SHAPE_A = ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "4", "--rollout-num-gpus", "12",
           "--rollout-num-gpus-per-engine", "4", "--num-gpus-per-node", "8"]


def test_ray_bundles_are_the_placement_group_positions():
    topo = Topology.from_flags(SHAPE_A)
    # 16 bundles in sorted order: node 0 GPUs 0-7, node 1 GPUs 0-7 (no GPU left idle)
    assert slots(topo) == [(n, g) for n in range(2) for g in range(8)]
    assert need_per_node(topo) == [8, 8]
    assert _ranks_on_node(topo, 0) == 4 and _ranks_on_node(topo, 1) == 0


def test_show_prints_the_placement_group_and_mid_node_engine():
    text = text_map(Topology.from_flags(SHAPE_A))
    assert "placement group: 16 GPU bundles packed over 2 node(s) of 8" in text
    assert "actor 0-3; rollout 4-15 (3 x 4)" in text
    node0 = text.split("node 0\n")[1].split("node 1")[0]
    assert node0.count("engine 0") == 4 and "r3" in node0


def test_actor_ranks_fill_nodes_whatever_the_per_node_flag_says():
    # actor 2 x 4 on nodes of 8: miles' packed group puts all 8 ranks on node 0
    topo = Topology.from_flags(["--actor-num-nodes", "2", "--actor-num-gpus-per-node", "4",
                                "--num-gpus-per-node", "8", "--colocate"])
    assert [topo.placement(r) for r in (0, 4, 7)] == [(0, 0), (0, 4), (0, 7)]
    assert topo.placement_group.nodes == 1 and slots(topo) == [(0, g) for g in range(8)]
    assert [w.code for w in topo.warnings] == ["actor-node-shape-ignored"]


def test_colocated_engines_share_the_actor_bundles():
    topo = Topology.from_flags(["--actor-num-nodes", "2", "--actor-num-gpus-per-node", "4",
                                "--num-gpus-per-node", "4", "--colocate",
                                "--rollout-num-gpus-per-engine", "2"])
    assert topo.placement_group.rollout_offset == 0 and topo.placement_group.bundles == 8
    assert topo.engine_gpus(3) == ((1, 2), (1, 3)) == (topo.placement(6), topo.placement(7))
    assert len(slots(topo)) == 8


def test_eval_engines_are_shown_after_rollout_engines():
    topo = Topology.from_flags(SHAPE_A[:5] + ["8", "--rollout-num-gpus-per-engine", "4",
                                              "--num-gpus-per-node", "8", "--eval-num-gpus", "4",
                                              "--eval-num-gpus-per-engine", "4"])
    text = text_map(topo)
    assert "eval 12-15 (1 x 4)" in text and "eval engine 2" in text
    assert len(slots(topo)) == 16


def test_the_placement_group_is_built_once_and_inverts_every_slot():
    """`Placement` is the one home of the slot inverse: the rank on a GPU and the ranks of a
    node agree with `placement(rank)` on a shape where the actor's GPUs per node (4) are
    not the node's (8), the case a restated `node * gpus_per_node + gpu` gets wrong."""
    topo = Topology.from_flags(["--actor-num-nodes", "3", "--actor-num-gpus-per-node", "4",
                                "--num-gpus-per-node", "8", "--rollout-num-gpus", "4"])
    pg = topo.placement_group
    assert pg is topo.placement_group  # built once per topology
    for r in range(topo.world_size):
        assert pg.rank_at(topo.placement(r)) == r and pg.position(pg.slot(r)) == r
    assert [pg.rank_at((1, g)) for g in (3, 4)] == [11, None]  # GPU 4 of node 1 is rollout's
    assert [list(pg.ranks_on(n)) for n in range(3)] == [list(range(8)), [8, 9, 10, 11], []]
    assert sum(len(pg.ranks_on(n)) for n in range(pg.nodes)) == topo.world_size
    wrong = {(r // 4, r % 4) for r in range(topo.world_size)}  # the actor-shape inverse
    assert wrong != {topo.placement(r) for r in range(topo.world_size)}
    assert pg.slots() == slots(topo) and pg.engines == topo.placement_group.rollout_engines == 4


def test_pipeline_layers_are_a_ranks_virtual_stages_in_order():
    topo = Topology.from_flags(["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "2",
                                "--pipeline-model-parallel-size", "2", "--num-layers", "8",
                                "--num-virtual-stages-per-pipeline-rank", "2", "--colocate"])
    assert topo.stages.pipeline(0) == (0, 1, 4, 5) and topo.stages.pipeline(1) == (2, 3, 6, 7)
