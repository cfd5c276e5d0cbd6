"""`show --svg` read as a person sees it: rendered by a real SVG renderer (cairosvg), every
text's inked box measured from the pixels, and none may overlap another text, cross a GPU
box it does not belong to, or run off the picture."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET

import pytest

from miles_topology import Topology
from miles_topology.reporting.show import svg_map

try:  # the test extra pins cairosvg; it needs the system's libcairo2 (Debian: libcairo2)
    import cairosvg
    from PIL import Image
except (ImportError, OSError) as e:  # pragma: no cover
    pytest.skip(f"no SVG renderer: {e}", allow_module_level=True)
NS = "{http://www.w3.org/2000/svg}"


def inked(svg: str) -> list[tuple[str, tuple[int, int, int, int]]]:
    """(text, pixel box) of every <text>, each rendered alone on a transparent canvas."""
    root = ET.fromstring(svg)
    texts = [t for t in root if t.tag == f"{NS}text"]
    out = []
    full = (0.0, 0.0, float(root.get("width")), float(root.get("height")))
    for t in texts:
        x, y = float(t.get("x")), float(t.get("y"))
        # a window around where the text should be (fast); the whole picture if its ink
        # reaches the window's edge
        box = _ink(root, t, (x - 40, y - 40, x + 40 + 20 * len(t.text or ""), y + 40))
        if box is None or box[0] == "edge":
            box = _ink(root, t, full)
        assert box is not None, f"{t.text!r} draws nothing"
        out.append((t.text, box))
    return out


def _ink(root, text, window):
    """The pixel box (in picture coordinates) of one text rendered alone in `window`."""
    x0, y0, x1, y1 = (round(v) for v in window)
    alone = ET.Element(root.tag, {**root.attrib, "width": str(x1 - x0),
                                  "height": str(y1 - y0),
                                  "viewBox": f"{x0} {y0} {x1 - x0} {y1 - y0}"})
    alone.append(text)
    png = cairosvg.svg2png(bytestring=ET.tostring(alone))
    got = Image.open(io.BytesIO(png)).getchannel("A").getbbox()
    if got is None:
        return None
    if got[0] == 0 or got[1] == 0 or got[2] == x1 - x0 or got[3] == y1 - y0:
        if (x0, y0) != (0, 0):
            return ("edge",)
    return (got[0] + x0, got[1] + y0, got[2] + x0, got[3] + y0)


def boxes(svg: str) -> list[tuple[float, float, float, float]]:
    root = ET.fromstring(svg)
    return [(float(r.get("x")), float(r.get("y")), float(r.get("x")) + float(r.get("width")),
             float(r.get("y")) + float(r.get("height")))
            for r in root if r.tag == f"{NS}rect" and r.get("rx")]


def meets(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def inside(a, b) -> bool:
    return b[0] <= a[0] and a[2] <= b[2] and b[1] <= a[1] and a[3] <= b[3]


def problems(svg: str) -> list[str]:
    root = ET.fromstring(svg)
    width, height = float(root.get("width")), float(root.get("height"))
    got = inked(svg)
    rects = boxes(svg)
    out = []
    for i, (text, box) in enumerate(got):
        if box[2] >= width - 1 or box[3] >= height - 1:
            out.append(f"{text!r} runs off the picture")
        crossed = [r for r in rects if meets(box, r) and not inside(box, r)]
        if crossed:
            out.append(f"{text!r} crosses a GPU box")
        for other, obox in got[i + 1:]:
            if meets(box, obox):
                out.append(f"{text!r} overlaps {other!r}")
    return out


def png_size(svg: str) -> tuple[int, int]:
    return Image.open(io.BytesIO(cairosvg.svg2png(bytestring=svg.encode()))).size


SMALL = Topology(nodes=2, gpus_per_node=4, colocate=True, ep=2, experts=8, engine_size=2)


def test_the_overlap_check_catches_what_it_guards_against():
    """The measure is real: the issue's header line drawn over node 0's boxes, a text
    cut off at the right, two texts at one place."""
    import re

    svg = svg_map(SMALL)
    x, y, _, _ = boxes(svg)[0]
    texts = re.findall(r"<text [^>]*>[^<]*</text>", svg)
    header = texts[4]  # the fifth header line
    over = re.sub(r'x="[^"]*" y="[^"]*"', f'x="{x - 30}" y="{y + 30}"', header)
    assert any("crosses a GPU box" in p for p in problems(svg.replace(header, over)))
    width = float(ET.fromstring(svg).get("width"))
    cut = re.sub(r'x="[^"]*"', f'x="{width - 40}"', header, count=1)
    assert any("runs off" in p for p in problems(svg.replace(header, cut)))
    assert any("overlaps" in p for p in problems(svg.replace(texts[0], texts[0] * 2)))


@pytest.mark.parametrize("color_by", ["engine", "ep", "pp", "dp"])
def test_a_small_job_draws_every_text_clear(color_by, tmp_path):
    topo = SMALL if color_by != "pp" else Topology(
        nodes=2, gpus_per_node=4, colocate=True, pp=2, layers=4, heads=4)
    svg = svg_map(topo, color_by)
    assert problems(svg) == []
    assert "colour:" in svg and svg.count('rx="6"') == 8  # a legend; every GPU drawn
    (tmp_path / f"{color_by}.png").write_bytes(cairosvg.svg2png(bytestring=svg.encode()))


def test_a_512_gpu_job_folds_into_a_picture_one_reads():
    topo = Topology(nodes=64, gpus_per_node=8, colocate=True, tp=2, sp=True, ep=16,
                    experts=128, layers=48, heads=32, engine_size=16)
    svg = svg_map(topo, "ep")
    width, height = png_size(svg)
    assert width < 1500 and height < 1000, (width, height)  # was 1380 x 6864
    assert "every 4, x 16" in svg and "nodes 0-60" in svg
    assert problems(svg) == []
    unfolded = svg_map(topo, "ep", fold=False)
    assert unfolded.count('rx="6"') == 512 and svg.count('rx="6"') == 32


def test_colour_follows_the_role():
    import re

    def fills(svg):
        return re.findall(r'rx="6" fill="(#[0-9a-f]+)"', svg)

    by_engine, by_dp = fills(svg_map(SMALL, "engine")), fills(svg_map(SMALL, "dp"))
    assert len(set(by_engine)) == 4 and len(set(by_dp)) == 8  # 4 engines; dp 8
    by_ep = fills(svg_map(SMALL, "ep"))
    assert len(set(by_ep)) == 4  # EP 2 over 8 ranks: 4 groups of 2 GPUs
