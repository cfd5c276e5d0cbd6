"""The rank / GPU / expert map of a Topology, as text and as SVG."""

from __future__ import annotations

from html import escape

from .errors import InputError
from .model import Topology


def _experts(ids: tuple[int, ...]) -> str:
    if not ids:
        return "-"
    return f"e{ids[0]}" if len(ids) == 1 else f"e{ids[0]}-{ids[-1]}"


def rank_label(topo: Topology, rank: int) -> list[str]:
    """Lines describing one train rank: its coordinates on both grids and its experts."""
    d = topo.coord(rank)
    x = topo.coord(rank, expert=True)
    lines = [
        f"r{rank}",
        f"tp{d['tp']} cp{d['cp']} dp{d['dp']} pp{d['pp']}",
        f"etp{x['etp']} ep{x['ep']} edp{x['edp']}",
    ]
    if topo.experts:
        lines.append(_experts(topo.local_experts(rank)))
    return lines


def engine_of_gpu(topo: Topology) -> dict[tuple[int, int], int]:
    return {g: e for e in range(topo.placement_group.engines) for g in topo.engine_gpus(e)}


def cells(topo: Topology) -> dict[tuple[int, int], list[str]]:
    """(node, GPU) -> label lines, for every GPU the job uses."""
    out: dict[tuple[int, int], list[str]] = {}
    for r in range(topo.world_size):
        out[topo.placement(r)] = rank_label(topo, r)
    for gpu, e in engine_of_gpu(topo).items():
        out.setdefault(gpu, []).append(f"{'eval ' if e >= topo.num_engines else ''}engine {e}")
    return out


def placement_line(topo: Topology) -> str:
    """miles' one packed placement group, as positions: who holds which run of bundles."""
    parts = [f"actor 0-{topo.world_size - 1}"] if not topo.rollout_only else []
    for g in topo.placement_group.groups:
        if g.gpus:
            model = "rollout" if g.model == "default" else g.model
            name = model if g.kind == "regular" else f"{model} {g.kind}"
            parts.append(f"{name} {g.start}-{g.start + g.gpus - 1}"
                         f" ({g.engines} x {g.engine_size})")
    return (f"placement group: {topo.placement_gpus} GPU bundles packed over "
            f"{topo.nodes_needed} node(s) of {topo.node_gpus_used} (position i = node i // "
            f"{topo.node_gpus_used}, GPU i % {topo.node_gpus_used}): " + "; ".join(parts))


def header(topo: Topology) -> str:
    engines = (
        f"{topo.num_engines} rollout engine(s) x {topo.engine_size} GPU"
        f" ({'colocated' if topo.colocate else 'disaggregated'})"
        if topo.num_engines
        else "no rollout engines"
    )
    return (
        f"world {topo.world_size} = {topo.nodes} node(s) x {topo.gpus_per_node} GPUs; "
        f"order {topo.order}\n"
        f"dense  tp {topo.tp} x cp {topo.cp} x dp {topo.dp} x pp {topo.pp}"
        + (f" (vpp {topo.chunks})" if topo.chunks > 1 else "")
        + f"\nexpert etp {topo.etp} x ep {topo.ep} x edp {topo.edp} x pp {topo.pp}"
        + (f"; {topo.experts} experts, {topo.experts_per_rank} per EP rank" if topo.experts else "")
        + f"\n{engines}\n{placement_line(topo)}"
    )


MAX_GPUS = 1 << 16  # the map lists every GPU; beyond this it shows the sizes only


def too_big(topo: Topology) -> str | None:
    """Why the per-GPU map is not drawn (a size beyond what one can list), or None."""
    n = max(topo.placement_gpus, topo.world_size)
    return f"{n} GPUs is more than the {MAX_GPUS} the map lists one by one" if n > MAX_GPUS \
        else None


def text_map(topo: Topology) -> str:
    """Nodes as blocks, one column per GPU; each cell: rank, coordinates, experts, engine."""
    if too_big(topo):
        return f"{header(topo)}\n\nGPU map not drawn: {too_big(topo)}."
    grid = cells(topo)
    nodes = sorted({n for n, _ in grid})
    width = max(len(s) for lines in grid.values() for s in lines) + 2
    out = [header(topo), ""]
    for n in nodes:
        gpus = sorted(g for m, g in grid if m == n)
        out.append(f"node {n}")
        out.append("  " + "".join(f"gpu {g}".ljust(width) for g in gpus).rstrip())
        depth = max(len(grid[(n, g)]) for g in gpus)
        for i in range(depth):
            row = [grid[(n, g)][i] if i < len(grid[(n, g)]) else "" for g in gpus]
            out.append("  " + "".join(s.ljust(width) for s in row).rstrip())
    return "\n".join(out)


def svg_map(topo: Topology) -> str:
    """The same map as an SVG: one row of GPU boxes per node, engines tinted per engine."""
    if too_big(topo):
        raise InputError(f"no SVG: {too_big(topo)}")
    grid = cells(topo)
    nodes = sorted({n for n, _ in grid})
    per_node = max(g for _, g in grid) + 1
    engine = engine_of_gpu(topo)
    w, h, pad, top = 150, 96, 10, 70
    width = pad * 2 + 80 + per_node * (w + pad)
    height = top + len(nodes) * (h + pad) + pad
    palette = ["#e3f2fd", "#fce4ec", "#e8f5e9", "#fff3e0", "#ede7f6", "#e0f7fa", "#f9fbe7"]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="monospace" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    for i, line in enumerate(header(topo).splitlines()):
        parts.append(f'<text x="{pad}" y="{16 + 14 * i}">{escape(line)}</text>')
    for row, n in enumerate(nodes):
        y = top + row * (h + pad)
        parts.append(f'<text x="{pad}" y="{y + h // 2}">node {n}</text>')
        for g in range(per_node):
            x = pad + 80 + g * (w + pad)
            lines = grid.get((n, g))
            fill = palette[engine[(n, g)] % len(palette)] if (n, g) in engine else "#f5f5f5"
            stroke = "#333" if lines else "#ccc"
            parts.append(
                f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" fill="{fill}" '
                f'stroke="{stroke}"/>'
            )
            parts.append(f'<text x="{x + 6}" y="{y + 14}" fill="#666">gpu {g}</text>')
            for i, line in enumerate(lines or []):
                parts.append(f'<text x="{x + 6}" y="{y + 30 + 13 * i}">{escape(line)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)
