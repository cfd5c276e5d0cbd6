"""Parameters per rank: the estimate (miles_topology/judging/memory.py) equals megatron-core.

One group of gloo processes per world size joins every configuration in turn (process
group set up once; initialize_model_parallel / destroy_model_parallel per configuration),
builds megatron-core GPTModel with the local spec on the CPU (every virtual stage, MTP, tied
or untied embeddings, MoE or dense, uneven first/last stages) and counts its parameters; the
parent compares every rank with `train_memory(...).rank(r).params`. MLA is not among them:
megatron-core 0.16 builds MLASelfAttention only with Transformer Engine.
"""

from __future__ import annotations

import json
import os
import random
import warnings

import pytest

from miles_topology import Topology, TopologyError
from miles_topology.judging.memory import (
    Shape,
    layout_of,
    megatron_formula,
    train_memory,
)
from miles_topology.model.topology import megatron_args


def _divs(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def random_config(rng: random.Random, world: int) -> dict | None:
    """A small model and layout; None when the Topology refuses it (drawn again)."""
    tp = rng.choice([t for t in _divs(world) if t <= 4])
    pp = rng.choice([p for p in _divs(world // tp) if p <= 4])
    vpp = rng.choice([1, 1, 2]) if pp > 1 else 1
    moe = rng.random() < 0.7
    per = rng.choice([1, 2])
    layers = pp * vpp * per
    first = last = None
    if pp >= 2 and vpp == 1 and rng.random() < 0.4:  # uneven first/last stages
        first, last = rng.choice([(1, 2), (2, 1), (1, 1)])
        layers = first + last + (pp - 2) * per
    heads = tp * rng.choice([1, 2])
    groups = rng.choice([g for g in _divs(heads) if g % tp == 0 or tp % g == 0])
    kv = rng.choice([4, 8])
    cfg = dict(
        world=world, tp=tp, pp=pp, vpp=vpp, layers=layers, first=first, last=last,
        heads=heads, groups=groups, kv=kv,
        hidden=8 * rng.choice([2, 4]), ffn=tp * 4 * rng.choice([1, 3]),
        vocab=rng.choice([50, 130, 257]), multiple=rng.choice([8, 16]),
        swiglu=rng.random() < 0.5, rms=rng.random() < 0.5,
        bias=not moe and rng.random() < 0.5, qkv_bias=rng.random() < 0.3,
        qk_norm=rng.random() < 0.5, tied=rng.random() < 0.5,
        mtp=rng.choice([0, 0, 1]),
        ep=1, etp=tp, experts=None, moe_ffn=None, shared=0, topk=2, freq=1, cp=1,
    )
    if moe:
        rest = world // pp
        etp = rng.choice([1, tp]) if rest % tp == 0 else 1
        ep = rng.choice([e for e in _divs(rest // etp) if e <= 4])
        freq = rng.choice([1, 2, None])
        cfg.update(ep=ep, etp=etp, experts=ep * rng.choice([2, 4]), moe_ffn=etp * 4,
                   shared=rng.choice([0, tp * 4]), topk=2,
                   freq=freq if freq else [int(rng.random() < 0.6) for _ in range(layers)])
    try:
        topology(cfg)
    except TopologyError:
        return None
    return cfg


def topology(c: dict) -> Topology:
    fields = dict(nodes=1, gpus_per_node=c["world"], tp=c["tp"], pp=c["pp"], ep=c["ep"],
                  etp=c["etp"], sp=c["tp"] > 1, layers=c["layers"], heads=c["heads"],
                  query_groups=c["groups"], vpp=c["vpp"] if c["vpp"] > 1 else None,
                  first_stage_layers=c["first"], last_stage_layers=c["last"],
                  mtp_layers=c["mtp"] or None)
    if c["experts"]:
        freq = c["freq"]
        fields.update(experts=c["experts"], topk=c["topk"],
                      moe_layer_freq=tuple(freq) if isinstance(freq, list) else freq)
    return Topology(**fields)


def shape(c: dict) -> Shape:
    return Shape(hidden=c["hidden"], ffn=c["ffn"], vocab=c["vocab"], vocab_multiple=c["multiple"],
                 kv_channels=c["kv"], moe_ffn=c["moe_ffn"], shared_ffn=c["shared"],
                 swiglu=c["swiglu"], rms=c["rms"], bias=c["bias"], qkv_bias=c["qkv_bias"],
                 qk_norm=c["qk_norm"], tied=c["tied"], learned_pos=0)


def _build(c: dict, padded_vocab: int) -> int:
    """Parameters this rank holds, over its virtual stages (Megatron-LM's model provider)."""
    import torch
    import torch.nn.functional as F
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import (
        get_gpt_decoder_block_spec,
        get_gpt_layer_local_spec,
        get_gpt_mtp_block_spec,
    )
    from megatron.core.transformer import TransformerConfig

    kw = dict(
        num_layers=c["layers"], hidden_size=c["hidden"], num_attention_heads=c["heads"],
        num_query_groups=c["groups"], ffn_hidden_size=c["ffn"], kv_channels=c["kv"],
        tensor_model_parallel_size=c["tp"], pipeline_model_parallel_size=c["pp"],
        virtual_pipeline_model_parallel_size=c["vpp"] if c["vpp"] > 1 else None,
        expert_model_parallel_size=c["ep"], expert_tensor_parallel_size=c["etp"],
        sequence_parallel=False, gated_linear_unit=c["swiglu"],
        activation_func=F.silu if c["swiglu"] else F.gelu,
        normalization="RMSNorm" if c["rms"] else "LayerNorm", add_bias_linear=c["bias"],
        add_qkv_bias=c["qkv_bias"], qk_layernorm=c["qk_norm"],
        num_layers_in_first_pipeline_stage=c["first"],
        num_layers_in_last_pipeline_stage=c["last"], mtp_num_layers=c["mtp"] or None,
        use_cpu_initialization=True, perform_initialization=False,
        pipeline_dtype=torch.float32,
    )
    if c["experts"]:
        kw.update(num_moe_experts=c["experts"], moe_ffn_hidden_size=c["moe_ffn"],
                  moe_router_topk=c["topk"], moe_layer_freq=c["freq"],
                  moe_shared_expert_intermediate_size=c["shared"] or None)
    config = TransformerConfig(**kw)
    total = 0
    for v in range(c["vpp"]):
        vp = v if c["vpp"] > 1 else None
        if c["experts"]:
            spec = get_gpt_decoder_block_spec(config, use_transformer_engine=False,
                                              normalization=config.normalization, vp_stage=vp)
        else:
            spec = get_gpt_layer_local_spec(qk_layernorm=c["qk_norm"],
                                            normalization=config.normalization)
        mtp = get_gpt_mtp_block_spec(config, spec, use_transformer_engine=False, vp_stage=vp) \
            if c["mtp"] else None
        model = GPTModel(
            config=config, transformer_layer_spec=spec, vocab_size=padded_vocab,
            max_sequence_length=64,
            pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp),
            post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp),
            share_embeddings_and_output_weights=c["tied"], position_embedding_type="rope",
            mtp_block_spec=mtp, vp_stage=vp)
        total += sum(p.numel() for p in model.parameters())
    return total


def _groups(store: str, rank: int, world: int, c: dict):
    """A fresh world group and megatron-core's groups for `c`'s layout: no gloo duplicates
    (the backend is gloo already), so few gloo threads live at a time."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    ps.initialize_model_parallel(**megatron_args(topology(c)),
                                 create_gloo_process_groups=False)


def _free() -> None:
    """Destroy megatron-core's groups and every process group (each holds gloo threads)."""
    import gc

    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    ps.destroy_model_parallel()
    dist.destroy_process_group()
    gc.collect()


def _count_all(rank: int, world: int, store: str, configs: list[dict]) -> list:
    """Each configuration's parameters on this rank; configurations with the same layout
    (megatron_args) share one set of groups, built once."""
    got: list = [None] * len(configs)
    order = sorted(range(len(configs)), key=lambda i: repr(megatron_args(topology(configs[i]))))
    current, n = None, 0
    for i in order:
        c = configs[i]
        key = repr(megatron_args(topology(c)))
        if key != current:
            if current is not None:
                _free()
            n += 1
            _groups(f"{store}.{n}", rank, world, c)
            current = key
        try:
            got[i] = _build(c, shape(c).padded_vocab(c["tp"]))
        except Exception as e:  # reported per configuration, not a hang of the others
            got[i] = f"{type(e).__name__}: {e}"
    if current is not None:
        _free()
    return got


def build_here(configs: list[dict], store: str) -> list:
    """Each configuration on a one-process gloo group in this process (pp 1: megatron-core
    moves no tensor to a GPU on its own then)."""
    return [[n] for n in _count_all(0, 1, store, configs)]


def _worker(rank: int, world: int, store: str, configs: list[dict], out: str) -> None:
    warnings.filterwarnings("ignore")
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    import torch

    torch.set_num_threads(1)
    # the CPU stands in for the GPU where megatron-core moves a tensor on its own (the tied
    # embedding's all-reduce over pipeline stages): counting only
    torch.Tensor.cuda = lambda self, *a, **k: self
    torch.cuda.current_device = lambda: "cpu"
    got = _count_all(rank, world, store, configs)
    with open(f"{out}/rank{rank}.json", "w") as f:
        json.dump(got, f)


def run_group(tmp_path_factory, configs: list[dict], world: int) -> list[list]:
    """Per configuration, the parameter count of each rank (one spawn for all of them; at
    most 4 processes on this 2-core machine)."""
    import multiprocessing

    import torch.multiprocessing as mp

    assert world <= 4
    multiprocessing.set_forkserver_preload(["megatron.core.models.gpt"])
    store = tmp_path_factory.mktemp("store") / "store"
    out = tmp_path_factory.mktemp("out")
    mp.start_processes(_worker, args=(world, str(store), configs, str(out)), nprocs=world,
                       join=True, start_method="forkserver")
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]
    return [[ranks[r][i] for r in range(world)] for i in range(len(configs))]


def draw(seed: int, world: int, n: int) -> list[dict]:
    rng = random.Random(seed)
    out: list[dict] = []
    while len(out) < n:
        c = random_config(rng, world)
        if c is not None:
            out.append(c)
    return out


def estimate(c: dict) -> list[int]:
    est = train_memory(shape(c), layout_of(topology(c)))
    return [est.rank(r).params.total for r in range(c["world"])]


def assert_parity(configs: list[dict], built: list[list]) -> None:
    bad = [(c, b, estimate(c)) for c, b in zip(configs, built) if b != estimate(c)]
    assert not bad, "\n".join(f"{c}\n  megatron-core {b}\n  estimate      {e}" for c, b, e in bad)


ONE = draw(5, 1, 6)  # one rank: tp = pp = ep = 1, every model feature
QUICK = draw(7, 4, 4)
SLOW2 = draw(13, 2, 16)
SLOW4 = draw(11, 4, 36)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    return run_group(tmp_path_factory, QUICK, 4)


def test_parameters_equal_megatron_core_on_one_rank(tmp_path):
    assert_parity(ONE, build_here(ONE, str(tmp_path / "store")))


@pytest.mark.slow
def test_parameters_per_rank_equal_megatron_core_4_ranks(quick):
    assert_parity(QUICK, quick)


@pytest.mark.slow
def test_parameters_per_rank_equal_megatron_core_52_random(tmp_path_factory):
    """52 random configurations (36 on 4 ranks, 16 on 2) plus the 4 and the 6 above."""
    assert_parity(SLOW4, run_group(tmp_path_factory, SLOW4, 4))
    assert_parity(SLOW2, run_group(tmp_path_factory, SLOW2, 2))


def test_the_random_draw_covers_every_feature():
    every = ONE + QUICK + SLOW2 + SLOW4
    assert len(every) >= 50
    seen = {
        "tp": any(c["tp"] > 1 for c in every), "pp": any(c["pp"] > 1 for c in every),
        "vpp": any(c["vpp"] > 1 for c in every), "ep": any(c["ep"] > 1 for c in every),
        "etp<tp": any(c["experts"] and c["etp"] < c["tp"] for c in every),
        "mtp": any(c["mtp"] for c in every), "tied": any(c["tied"] for c in every),
        "untied": any(not c["tied"] for c in every),
        "uneven": any(c["first"] for c in every), "dense": any(not c["experts"] for c in every),
        "shared": any(c["shared"] for c in every),
        "mtp+pp": any(c["mtp"] and c["pp"] > 1 for c in every),
    }
    assert all(seen.values()), [k for k, v in seen.items() if not v]


def test_a_wrong_count_is_caught():
    """The comparison can fail: twice the experts, or tied for untied embeddings, is seen."""
    c = next(c for c in QUICK if c["experts"])
    right = estimate(c)
    with pytest.raises(AssertionError):
        assert_parity([dict(c, experts=c["experts"] * 2)], [right])
    with pytest.raises(AssertionError):
        assert_parity([dict(c, tied=not c["tied"])], [right])
    assert_parity([c], [right])


def test_megatron_formula_is_off_by_the_expert_factor_where_ep_is_above_1():
    """Megatron-LM theoretical_memory_usage.py (up to core_v0.18) divides experts by tp x pp
    only: with ep > 1 it counts ep / etp... times the experts a rank holds; ours does not."""
    c = dict(world=8, tp=1, pp=1, vpp=1, layers=2, first=None, last=None, heads=4, groups=4,
             kv=8, hidden=32, ffn=64, vocab=256, multiple=8, swiglu=True, rms=True, bias=False,
             qkv_bias=False, qk_norm=False, tied=False, mtp=0, ep=8, etp=1, experts=16, moe_ffn=32,
             shared=0, topk=2, freq=1, cp=1)
    lay, s = layout_of(topology(c)), shape(c)
    ours = train_memory(s, lay).stages[0].params
    theirs = megatron_formula(s, lay)
    assert theirs - ours.total == ours.expert * (c["ep"] - 1)  # all 16 experts, not 2
    one = dict(c, ep=1, world=1)
    lay1 = layout_of(topology(one))
    assert megatron_formula(s, lay1) == train_memory(s, lay1).stages[0].params.total
