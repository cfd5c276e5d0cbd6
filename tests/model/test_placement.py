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


FT = ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "4", "--context-parallel-size",
      "2", "--colocate", "--use-fault-tolerance", "--ft-components", "train"]


def test_fault_tolerant_training_makes_the_world_one_replica():
    # miles 31f1ca9 utils/arguments.py:2857 and :2874: "train" in ft_components sets indep_dp,
    # and args.world_size becomes tp*pp*cp before Megatron derives dp (its FT e2e tests: world
    # 2, dp 1 on 4 GPUs with cp 2); the actor still places all 4 GPUs
    topo = Topology.from_flags(FT)
    assert (topo.world_size, topo.dp, topo.layout.actor_gpus) == (2, 1, 4)
    assert topo.placement_group.bundles == 4 and topo.placement_group.rollout_gpus == 4
    for other in (["--indep-dp"], []):  # --indep-dp alone does the same; FT without "train" not
        base = FT[:-3] + other
        topo = Topology.from_flags(base)
        assert (topo.world_size, topo.dp) == ((2, 1) if other else (4, 2))
    assert Topology.from_flags([*FT[:-3], "--ft-components", "train"]).world_size == 4
    # slime 624b824 defines neither --indep-dp nor --ft-components: its world is the actor's
    from miles_topology.reading.stack import Stack

    assert Topology.from_flags([*FT, "--indep-dp"], stack=Stack("slime")).world_size == 4


def test_colocated_rollout_gpus_follow_the_framework():
    from miles_topology.model.topology import summary
    from miles_topology.reading.stack import Stack

    argv = ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "2", "--colocate",
            "--rollout-num-gpus", "8"]
    # slime 624b824 utils/arguments.py:1951 fills rollout_num_gpus only when it is None
    # (its test_qwen3_0.6B_parallel_check.py launch 2: 8 engines beside a 2-GPU actor)
    slime = Topology.from_flags(argv, stack=Stack("slime"))
    assert summary(slime)["rollout_gpus"] == 8 and slime.placement_group.bundles == 8
    assert not slime.warnings
    # miles 31f1ca9 utils/arguments.py:3312 overwrites it with the actor's GPUs, and says so
    miles = Topology.from_flags(argv, stack=Stack("miles"))
    assert summary(miles)["rollout_gpus"] == 2 and miles.placement_group.bundles == 2
    assert [w.code for w in miles.warnings] == ["colocate-ignores-rollout-gpus"]


def test_train_only_keeps_the_parsers_rollout_gpus_but_starts_no_engine():
    # miles' test_qwen3_0.6B_megatron_fsdp_align.py launch 3: --colocate --debug-train-only;
    # args.rollout_num_gpus is the actor's 2 (utils/arguments.py:3312), and
    # _get_placement_group_layout (ray/placement_group.py:95) places the actor alone
    from miles_topology.model.topology import summary

    topo = Topology.from_flags(["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "2",
                                "--colocate", "--debug-train-only"])
    got = summary(topo)
    assert (got["rollout_gpus"], got["num_engines"], topo.placement_group.bundles) == (2, 0, 2)
