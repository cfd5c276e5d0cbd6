"""Decoding the engines' routed-experts payload: writable, compact, and loud when malformed."""

import base64
import tracemalloc
import warnings

import numpy as np
import pytest
import torch

from miles.rollout import RoutesError, decode_routes, encode_routes, route_dtype
from miles_topology import Topology


def topo(experts=8, layers=3, topk=2, **kw):
    return Topology(nodes=1, gpus_per_node=1, experts=experts, layers=layers, topk=topk, **kw)


def routes(tokens, layers, topk, experts, seed=0):
    """Valid routes: distinct ids per row."""
    rng = np.random.default_rng(seed)
    return np.argsort(rng.random((tokens - 1, layers, experts)), axis=-1)[..., :topk]


def test_roundtrip_smallest_dtype():
    for experts, dtype in [(8, np.uint8), (256, np.uint8), (300, np.uint16), (70_000, np.uint32)]:
        t = topo(experts=experts)
        r = routes(6, 3, 2, min(experts, 512))
        if experts == 70_000:
            r[0, 0] = [69_999, 0]
        a = decode_routes(encode_routes(r), t, tokens=6)
        assert a.dtype == dtype == route_dtype(experts)
        assert a.shape == (5, 3, 2)
        np.testing.assert_array_equal(a, r)


def test_writable_no_torch_warning():
    t = topo()
    payload = encode_routes(routes(9, 3, 2, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = decode_routes(payload, t, tokens=9)
        assert a.flags.writeable and a.base.flags.owndata and a.base.flags.writeable
        assert a[:, 1].flags.c_contiguous  # layer-major storage
        torch.from_numpy(a)  # would raise UserWarning-as-error if read-only
        a[0, 0, 0] = 1  # and it really is writable
        # the check can fail: the old frombuffer path trips the same filter
        old = np.frombuffer(base64.b64decode(payload), dtype=np.int32)
        with pytest.raises(UserWarning, match="not writable"):
            torch.from_numpy(old)


def test_at_most_one_copy():
    """Peak memory is the decoded bytes plus the one compact copy (and small bool scratch)."""
    t = topo(experts=128, layers=48, topk=8)
    r = routes(1025, 48, 8, 128)
    payload = encode_routes(r)
    raw = r.size * 4
    decode_routes(payload, t, tokens=1025)  # warm up
    tracemalloc.start()
    a = decode_routes(payload, t, tokens=1025)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert a.nbytes == r.size
    scratch = 2 * 1024 * 48  # two bool arrays of rows x layers for the duplicate check
    assert peak <= raw + a.nbytes + scratch + 64 * 1024, (peak, raw, a.nbytes)


def test_empty_and_inferred_rows():
    t = topo()
    assert decode_routes("", t, tokens=1).shape == (0, 3, 2)
    assert decode_routes(encode_routes(routes(5, 3, 2, 8)), t).shape == (4, 3, 2)
    assert decode_routes(encode_routes(routes(5, 3, 2, 8)).encode(), t).shape == (4, 3, 2)


def err(payload, t=None, tokens=5, sample="s7"):
    with pytest.raises(RoutesError) as e:
        decode_routes(payload, t or topo(), tokens=tokens, sample=sample)
    assert e.value.sample == sample and str(sample) in str(e.value)
    assert isinstance(e.value, ValueError)
    return str(e.value)


def test_malformed_encoding():
    assert "base64" in err("@@@@")
    assert "base64" in err("AAA")  # bad padding
    assert "base64" in err("é")
    assert "whole number of int32" in err(base64.b64encode(b"\0" * 6).decode())


def test_wrong_token_count():
    assert "at least 1 token" in err("", tokens=0)
    msg = err(encode_routes(routes(4, 3, 2, 8)), tokens=5)
    assert "3 token rows" in msg and "4" in msg
    with pytest.raises(RoutesError, match="whole number of rows"):
        decode_routes(encode_routes(np.zeros((7,))), topo())  # rows inferred: 7 % 6


def test_wrong_layer_count():
    assert "4 layers (the model has 3)" in err(encode_routes(routes(5, 4, 2, 8)))


def test_wrong_topk():
    assert "top-3 routes (the model routes top-2)" in err(encode_routes(routes(5, 3, 3, 8)))


@pytest.mark.parametrize("bad", [-1, 8, 1 << 20])
def test_ids_out_of_range(bad):
    r = routes(5, 3, 2, 8)
    r[2, 1, 1] = bad
    msg = err(encode_routes(r))
    assert f"expert id {bad} at token 2, layer 1" in msg and "0..7" in msg


def test_duplicate_ids():
    r = routes(5, 3, 2, 8)
    r[3, 2] = [5, 5]
    assert "duplicate expert ids [5, 5] at token 3, layer 2" in err(encode_routes(r))


def test_dense_layers_not_validated_moe_layers_are():
    t = topo(layers=4, moe_layer_freq=2)  # MoE layers 0 and 2
    r = routes(5, 4, 2, 8)
    r[:, 1] = 0  # a dense layer: engines leave zeros there
    r[:, 3] = -1
    assert decode_routes(encode_routes(r), t, tokens=5).shape == (4, 4, 2)
    r[1, 2] = [9, 1]
    assert "token 1, layer 2" in err(encode_routes(r), t)
    t = topo(layers=4, moe_layer_freq="[1,1,0,1]")
    r = routes(5, 4, 2, 8)
    r[0, 2] = [0, 0]
    decode_routes(encode_routes(r), t, tokens=5)
    r[4 - 1, 3] = [6, 6]
    assert "token 3, layer 3" in err(encode_routes(r), t)
