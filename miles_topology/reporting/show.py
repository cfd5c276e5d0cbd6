"""The rank / GPU / expert map of a Topology, as text and as SVG."""

from __future__ import annotations

from html import escape

from ..model.errors import InputError
from ..model.topology import Topology


def _experts(ids: tuple[int, ...]) -> str:
    if not ids:
        return "-"
    return f"e{ids[0]}" if len(ids) == 1 else f"e{ids[0]}-{ids[-1]}"


def rank_label(topo: Topology, rank: int) -> list[str]:
    """Lines describing one train rank: its coordinates on both grids and its experts."""
    d = topo.grid("dense").coord(rank)
    x = topo.grid("expert").coord(rank)
    lines = [
        f"r{rank}",
        f"tp{d['tp']} cp{d['cp']} dp{d['dp']} pp{d['pp']}",
        f"etp{x['etp']} ep{x['ep']} edp{x['edp']}",
    ]
    if topo.model.experts:  # the range of topo.local_experts, without listing it
        per = topo.model.experts // topo.layout.ep
        first = x["ep"] * per
        lines.append(_experts((first, first + per - 1) if per > 1 else (first,) if per else ()))
    return lines


def engine_of_gpu(topo: Topology) -> dict[tuple[int, int], int]:
    return {g: e for e in range(topo.placement_group.engines) for g in topo.engine_gpus(e)}


def cells(topo: Topology, mem: dict[int, float] | None = None
          ) -> dict[tuple[int, int], list[str]]:
    """(node, GPU) -> label lines, for every GPU the job uses; `mem`: GiB per train rank
    (fit.rank_gib), shown under its coordinates."""
    out: dict[tuple[int, int], list[str]] = {}
    for r in range(topo.world_size):
        out[topo.placement(r)] = rank_label(topo, r) + (
            [f"~{mem[r]:.1f} GiB"] if mem is not None else [])
    for gpu, e in engine_of_gpu(topo).items():
        out.setdefault(gpu, []).append(
            f"{'eval ' if e >= topo.placement_group.rollout_engines else ''}engine {e}"
        )
    return out


def placement_line(topo: Topology) -> str:
    """miles' one packed placement group, as positions: who holds which run of bundles."""
    lay, ro = topo.layout, topo.rollout
    parts = [f"actor 0-{lay.actor_gpus - 1}"] if not ro.rollout_only else []
    for g in topo.placement_group.groups:
        if g.gpus:
            model = "rollout" if g.model == "default" else g.model
            name = model if g.kind == "regular" else f"{model} {g.kind}"
            parts.append(f"{name} {g.start}-{g.start + g.gpus - 1}"
                         f" ({g.engines} x {g.engine_size})")
    return (f"placement group: {topo.placement_group.bundles} GPU bundles packed over "
            f"{topo.placement_group.nodes} node(s) of {lay.node_gpus_used} (position i = node i // "
            f"{lay.node_gpus_used}, GPU i % {lay.node_gpus_used}): " + "; ".join(parts))


def header(topo: Topology) -> str:
    lay, ro, mod = topo.layout, topo.rollout, topo.model
    engines = (
        f"{topo.placement_group.rollout_engines} rollout engine(s) x {ro.engine_size} GPU"
        f" ({'colocated' if ro.colocate else 'disaggregated'})"
        if topo.placement_group.rollout_engines
        else "no rollout engines"
    )
    return (
        (f"world {topo.world_size} a replica (--indep-dp), {lay.actor_gpus // topo.world_size}"
         f" replicas on " if lay.indep_dp else f"world {topo.world_size} = ")
        + f"{lay.nodes} node(s) x {lay.gpus_per_node} GPUs; "
        f"order {lay.order}\n"
        f"dense  tp {lay.tp} x cp {lay.cp} x dp {topo.dp} x pp {lay.pp}"
        + (f" (vpp {topo.stages.chunks})" if topo.stages.chunks > 1 else "")
        + f"\nexpert etp {lay.etp} x ep {lay.ep} x edp {topo.edp} x pp {lay.pp}"
        + (
            f"; {mod.experts} experts, {mod.experts // lay.ep} per EP rank"
            if mod.experts
            else ""
        )
        + f"\n{engines}\n{placement_line(topo)}"
    )


MAX_GPUS = 1 << 16  # the map lists every GPU; beyond this it shows the sizes only


def too_big(topo: Topology) -> str | None:
    """Why the per-GPU map is not drawn (a size beyond what one can list), or None."""
    n = max(topo.placement_group.bundles, topo.world_size)
    return f"{n} GPUs is more than the {MAX_GPUS} the map lists one by one" if n > MAX_GPUS \
        else None


def text_map(topo: Topology, mem: dict[int, float] | None = None) -> str:
    """Nodes as blocks, one column per GPU; each cell: rank, coordinates, experts, memory
    (`mem`, GiB per rank), engine."""
    if too_big(topo):
        return f"{header(topo)}\n\nGPU map not drawn: {too_big(topo)}."
    grid = cells(topo, mem)
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


# SVG geometry. Text is DejaVu Sans Mono (the monospace font Debian and most desktops
# have) at 12 px: 0.602 em a character, counted here as 7.3 px so a line never runs past
# the width it was given.
FONT, CHAR, LINE, INSET, GAP = 12, 7.3, 16, 8, 10
FOLD_OVER = 4  # more nodes than this: consecutive nodes laid out alike are drawn once
PALETTE = ["#bbdefb", "#f8bbd0", "#c8e6c9", "#ffe0b2", "#d1c4e9", "#b2ebf2", "#f0f4c3",
           "#ffccbc", "#cfd8dc", "#dcedc8"]
UNUSED = "#f5f5f5"
COLOR_BY = {
    "engine": "rollout engine",
    "ep": "EP group: the GPUs that exchange tokens in one all-to-all (same etp, edp, pp)",
    "pp": "pipeline stage (pp)",
    "dp": "data-parallel replica (dp)",
    "memory": "estimated memory of the train rank, as a share of the GPU's",
}
# --color-by memory: share of the GPU -> (upper bound, fill, label)
MEMORY_BANDS = ((0.5, "#c8e6c9", "under 50 %"), (0.75, "#f0f4c3", "50-75 %"),
                (0.9, "#ffe0b2", "75-90 %"), (1.0, "#ffab91", "90-100 %"),
                (float("inf"), "#e57373", "over 100 %: out of memory"))


def _colour(i: int) -> str:
    """A light fill per value: the palette, then hues a golden angle apart."""
    if i < len(PALETTE):
        return PALETTE[i]
    import colorsys

    r, g, b = colorsys.hls_to_rgb((i * 0.618034) % 1.0, 0.82, 0.6)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def _roles(topo: Topology, color_by: str, share: dict[int, float] | None = None
           ) -> tuple[dict[tuple[int, int], int], dict[int, str]]:
    """(node, GPU) -> the value it is coloured by, and each value's legend label (`share`:
    each rank's memory as a share of the GPU, for color_by memory)."""
    if color_by == "memory":
        if share is None:
            raise InputError("--color-by memory: no memory estimate for this input (give the "
                             "model shape: --hidden-size and the rest)")
        band = {r: next(i for i, b in enumerate(MEMORY_BANDS) if s <= b[0])
                for r, s in share.items()}
        return ({topo.placement(r): b for r, b in band.items()},
                {b: MEMORY_BANDS[b][2] for b in band.values()})
    if color_by == "engine":
        at = engine_of_gpu(topo)
        names = {
            e: f"{'eval ' if e >= topo.placement_group.rollout_engines else ''}engine {e}"
            for e in at.values()
        }
        return at, names
    at, names, index = {}, {}, {}
    for r in range(topo.world_size):
        d, x = topo.grid("dense").coord(r), topo.grid("expert").coord(r)
        if color_by == "ep":
            key = (x["etp"], x["edp"], x["pp"])
            label = f"EP group etp{key[0]} edp{key[1]} pp{key[2]}"
        else:
            key = d[color_by]
            label = f"{color_by} {key}"
        value = index.setdefault(key, len(index))
        at[topo.placement(r)] = value
        names[value] = label
    return at, names


def _signature(topo: Topology, node: int, ranks: dict, per_node: int) -> tuple:
    """What a node's map shows, up to the numbers that advance from node to node (ranks,
    dp/edp, engine numbers): equal signatures are drawn once when folded."""
    mod = topo.model
    here = [ranks.get((node, g)) for g in range(per_node)]
    base = min((r for r in here if r is not None), default=0)
    engines = engine_of_gpu(topo)
    first = min((engines[(node, g)] for g in range(per_node) if (node, g) in engines),
                default=0)
    out = []
    for g, r in enumerate(here):
        cell: tuple = ()
        if r is not None:
            d, x = topo.grid("dense").coord(r), topo.grid("expert").coord(r)
            cell = (r - base, d["tp"], d["cp"], d["pp"], x["etp"], x["ep"],
                    topo.local_experts(r) if mod.experts else ())
        e = engines.get((node, g))
        out.append(
            (cell, None if e is None else (e - first, e >= topo.placement_group.rollout_engines))
        )
    return tuple(out)


def _rows(topo: Topology, nodes: list[int], per_node: int, fold: bool
          ) -> list[tuple[int, int, int]]:
    """(node, how many nodes the row stands for, step between them) per drawn row.

    Nodes repeat with a period (an EP group over 4 nodes repeats every 4 nodes): the
    period that draws the fewest rows is chosen, and each run of equal blocks of that many
    nodes is drawn once."""
    if not fold or len(nodes) <= FOLD_OVER:
        return [(n, 1, 1) for n in nodes]
    ranks = {topo.placement(r): r for r in range(topo.world_size)}
    sigs = [_signature(topo, n, ranks, per_node) for n in nodes]
    best: list[tuple[int, int, int]] | None = None
    for period in range(1, min(len(nodes) // 2, 64) + 1):
        full = len(nodes) - len(nodes) % period
        blocks = [tuple(sigs[i:i + period]) for i in range(0, full, period)]
        rows: list[tuple[int, int, int]] = []
        i = 0
        while i < len(blocks):
            k = 1
            while i + k < len(blocks) and blocks[i + k] == blocks[i]:
                k += 1
            rows += [(nodes[i * period + j], k, period) for j in range(period)]
            i += k
        rows += [(n, 1, 1) for n in nodes[full:]]
        if best is None or len(rows) < len(best):
            best = rows
    return best


def _text(x: float, y: float, text: str, fill: str = "#000", weight: str = "") -> str:
    bold = ' font-weight="bold"' if weight else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" fill="{fill}"{bold}>{escape(text)}</text>'


def _width(text: str) -> float:
    return len(text) * CHAR


def svg_map(topo: Topology, color_by: str = "engine", fold: bool = True,
            mem: dict[int, float] | None = None, gpu_gib: float | None = None) -> str:
    """The map as an SVG a person reads at a glance: a wrapped header, one row of GPU boxes
    per node (more than FOLD_OVER nodes: consecutive nodes laid out alike are drawn once,
    marked "x N"), each box coloured by the role asked for (`color_by`: engine, ep, pp or
    dp; memory: each rank's estimate `mem`, GiB, against `gpu_gib`), and a legend. Every
    text is placed in room measured for it, so none overlaps."""
    if too_big(topo):
        raise InputError(f"no SVG: {too_big(topo)}")
    if color_by not in COLOR_BY:
        raise InputError(f"--color-by {color_by}: give one of {', '.join(COLOR_BY)}")
    grid = cells(topo, mem)
    nodes = sorted({n for n, _ in grid})
    per_node = max(g for _, g in grid) + 1
    share = {r: m / gpu_gib for r, m in mem.items()} if mem and gpu_gib else None
    role, names = _roles(topo, color_by, share)

    def colour(value: int) -> str:
        return MEMORY_BANDS[value][1] if color_by == "memory" else _colour(value)
    rows = _rows(topo, nodes, per_node, fold)
    depth = max(len(lines) for lines in grid.values()) + 1  # + the "gpu N" line
    box_w = max(100.0, max(_width(t) for lines in grid.values() for t in lines) + 2 * INSET)
    box = (box_w, depth * LINE + 2 * INSET)
    labels = [(f"node {n}" if k == 1 else f"nodes {n}-{n + (k - 1) * step}",
               "" if k == 1 else f"x {k}" if step == 1 else f"every {step}, x {k}")
              for n, k, step in rows]
    label_w = max(_width(t) for pair in labels for t in pair) + 2 * GAP
    width = max(label_w + per_node * (box_w + GAP), 60 * CHAR) + 2 * GAP
    chars = int((width - 2 * GAP) // CHAR)
    parts: list[str] = []
    y = _svg_wrapped(parts, GAP + FONT, header(topo).splitlines(), chars, indent="  ")
    y += GAP
    for (n, _, _), label in zip(rows, labels):
        y = _svg_node(parts, y, n, label, label_w, box, per_node, grid,
                      lambda cell: colour(role[cell]) if cell in role else UNUSED)
    # legend: what the colours mean, then one swatch per value (and the unused GPUs)
    y += GAP
    y = _svg_wrapped(parts, y + FONT, [f"colour: {COLOR_BY[color_by]}"], chars, "b") - FONT
    cells_drawn = [(n, g) for n, _, _ in rows for g in range(per_node)]
    y = _svg_legend(parts, y, _svg_entries(cells_drawn, role, names, colour, color_by, gpu_gib),
                    width)
    if any(k > 1 for _, k, _ in rows):
        note = ("x N: the row stands for N nodes laid out alike (every S-th node when "
                "marked \"every S\"), drawn once; their rank, dp, edp and engine numbers "
                "advance from node to node")
        y = _svg_wrapped(parts, y + GAP + FONT, [note], chars) - FONT
    height = y + GAP
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="DejaVu Sans Mono, monospace" '
        f'font-size="{FONT}">',
        f'<rect width="{width:.0f}" height="{height:.0f}" fill="white"/>',
        *parts, "</svg>"])


def _svg_wrapped(parts: list[str], y: float, lines: list[str], chars: int, weight: str = "",
                 indent: str = "") -> float:
    """Each line wrapped to `chars`, one text a piece from baseline `y` down (an empty line
    keeps its row); the baseline below the last."""
    import textwrap

    for line in lines:
        for piece in textwrap.wrap(line, chars, subsequent_indent=indent) or [""]:
            parts.append(_text(GAP, y, piece, weight=weight))
            y += LINE
    return y


def _svg_node(parts: list[str], y: float, n: int, label: tuple[str, str], label_w: float,
              box: tuple[float, float], per_node: int, grid: dict, fill_of) -> float:
    """One row: the node's label (and "x N" when it stands for several), then a box per GPU
    with its lines; the top of the next row."""
    (name, times), (box_w, box_h) = label, box
    parts.append(_text(GAP, y + box_h / 2, name, weight="bold"))
    if times:
        parts.append(_text(GAP, y + box_h / 2 + LINE, times, fill="#b71c1c", weight="b"))
    for g in range(per_node):
        x = GAP + label_w + g * (box_w + GAP)
        lines = grid.get((n, g))
        stroke = "#333" if lines else "#ccc"
        parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{box_w:.1f}" height="{box_h}" '
                     f'rx="6" fill="{fill_of((n, g))}" stroke="{stroke}"/>')
        parts.append(_text(x + INSET, y + INSET + FONT, f"gpu {g}", fill="#555"))
        for i, line in enumerate(lines or []):
            parts.append(_text(x + INSET, y + INSET + FONT + LINE * (i + 1), line))
    return y + box_h + GAP


def _svg_entries(cells_drawn: list[tuple[int, int]], role: dict, names: dict, colour,
                 color_by: str, gpu_gib: float | None) -> list[tuple[str, str]]:
    """The legend: (fill, text) per value drawn, then what the folded nodes and the
    uncoloured GPUs hold; for memory, first the GPU's size."""
    drawn = {role[c] for c in cells_drawn if c in role}
    entries = [(colour(v), names[v]) for v in sorted(drawn)]
    if len(drawn) < len(names):  # the folded nodes hold the others, in the same pattern
        entries.append(("none", f"+ {len(names) - len(drawn)} more in the folded nodes"))
    if any(c not in role for c in cells_drawn):
        entries.append((UNUSED, "not coloured: no " + ("engine" if color_by == "engine"
                                                       else "train rank")))
    if color_by == "memory":
        entries.insert(0, ("none", f"of {gpu_gib:g} GiB a GPU"))
    return entries


def _svg_legend(parts: list[str], y: float, entries: list[tuple[str, str]], width: float
                ) -> float:
    """One swatch and its text per entry, in as many columns as the picture is wide; the y
    below them."""
    entry_w = max(_width(t) for _, t in entries) + FONT + 3 * GAP
    cols = max(1, int((width - 2 * GAP) // entry_w))
    for i, (fill, text) in enumerate(entries):
        ex = GAP + (i % cols) * entry_w
        ey = y + (i // cols) * LINE + 4
        parts.append(f'<rect x="{ex:.1f}" y="{ey:.1f}" width="{FONT}" height="{FONT}" '
                     f'fill="{fill}" stroke="#333"/>')
        parts.append(_text(ex + FONT + GAP / 2, ey + FONT - 2, text))
    return y + ((len(entries) - 1) // cols + 1) * LINE + 4
