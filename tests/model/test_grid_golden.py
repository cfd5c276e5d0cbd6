"""Golden parity: every group equals megatron-core RankGenerator for the same sizes and order."""

import pytest
from megatron.core.parallel_state import RankGenerator

from miles_topology import Topology

DENSE = ["tp", "cp", "dp", "pp", "tp-cp", "dp-cp", "tp-pp", "tp-dp", "tp-dp-cp", "tp-cp-ep-dp-pp"]
EXPERT = ["tp", "ep", "dp", "pp", "tp-ep", "tp-ep-pp"]
A, B = "tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"

# (nodes, gpus per node, tp, pp, cp, ep, etp, order); with order B and pp > 1 megatron-core
# needs tp*cp == etp*ep (order-requires-equal-dp)
CASES = [
    (1, 8, 1, 1, 1, 1, 1, A), (1, 8, 2, 1, 1, 2, 2, A), (1, 8, 2, 2, 1, 2, 1, A),
    (1, 8, 2, 2, 2, 1, 1, A), (1, 8, 1, 1, 1, 8, 1, A), (2, 4, 1, 1, 1, 2, 1, A),
    (2, 4, 2, 1, 1, 2, 1, A), (2, 4, 2, 2, 1, 2, 1, B), (3, 4, 2, 1, 1, 3, 1, A),
    (3, 4, 1, 3, 1, 4, 1, A), (3, 2, 2, 1, 3, 1, 1, B), (3, 8, 4, 2, 1, 4, 1, A),
    (5, 2, 2, 1, 1, 5, 1, A), (5, 4, 1, 5, 2, 2, 1, B), (2, 8, 4, 2, 2, 4, 2, A),
    (2, 8, 2, 4, 1, 2, 1, B), (4, 8, 8, 2, 1, 16, 1, A), (4, 8, 2, 2, 2, 4, 1, B),
    (1, 6, 3, 2, 1, 3, 1, A), (7, 2, 2, 7, 1, 2, 1, A), (3, 6, 3, 1, 2, 9, 1, B),
    (2, 2, 1, 2, 1, 2, 1, A), (1, 4, 4, 1, 1, 4, 1, A), (1, 4, 4, 1, 1, 1, 4, B),
    (6, 4, 2, 3, 2, 4, 2, A), (8, 8, 8, 8, 1, 8, 1, A), (8, 8, 8, 4, 2, 16, 1, B),
    (9, 4, 4, 3, 1, 12, 1, A), (1, 1, 1, 1, 1, 1, 1, A), (11, 2, 2, 1, 11, 2, 1, B),
    (2, 4, 2, 2, 1, 1, 2, A), (3, 8, 2, 3, 4, 8, 1, A), (4, 2, 1, 4, 1, 2, 1, A),
]


@pytest.mark.parametrize("nodes,gpn,tp,pp,cp,ep,etp,order", CASES)
def test_groups_equal_rank_generator(nodes, gpn, tp, pp, cp, ep, etp, order):
    topo = Topology(nodes=nodes, gpus_per_node=gpn, node_gpus=max(8, gpn), tp=tp, pp=pp, cp=cp,
                    ep=ep, etp=etp, order=order, colocate=True)
    world = nodes * gpn
    dense = RankGenerator(tp=tp, ep=1, dp=world // (tp * cp * pp), pp=pp, cp=cp, order=order)
    expert = RankGenerator(tp=etp, ep=ep, dp=world // (etp * ep * pp), pp=pp, cp=1, order=order)
    for token in DENSE:
        assert topo.rank_groups(token) == dense.get_ranks(token), token
    for token in EXPERT:
        assert topo.rank_groups(token, expert=True) == expert.get_ranks(token), token
    assert (topo.dp, topo.edp) == (dense.dp, expert.dp)


def test_at_least_thirty_cases_with_odd_node_counts():
    assert len(CASES) >= 30
    assert sum(c[0] % 2 == 1 and c[0] > 1 for c in CASES) >= 8


def test_unknown_axis_lists_valid_ones():
    topo = Topology(nodes=1, gpus_per_node=8, tp=2, colocate=True)
    with pytest.raises(KeyError, match="valid axes: tp, cp, ep, dp, pp"):
        topo.rank_groups("tp-xp")


def test_expert_aliases_etp_edp():
    topo = Topology(nodes=2, gpus_per_node=4, tp=2, sp=True, ep=2, etp=1, experts=4, colocate=True)
    assert topo.rank_groups("etp-edp", expert=True) == topo.rank_groups("tp-dp", expert=True)
