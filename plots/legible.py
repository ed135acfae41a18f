"""What keeps a figure readable where its data crowd: lines drawn over one another said so in the legend, and point
labels placed where they print over no other (left out where there is no such place)."""

from __future__ import annotations

import numpy as np
from matplotlib.transforms import Bbox

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")  # told apart where colours are not


def coinciding(series: list[tuple[str, list, list]]) -> list[str]:
    """The legend labels of ``series`` (label, x, y), each drawn exactly under an earlier one (the same points,
    to 1e-9 relative) marked ``(= that one)``: a line that hides under another still says where it is."""
    labels = []
    arrays = [(label, np.asarray(x, float), np.asarray(y, float)) for label, x, y in series]  # None: NaN
    for i, (label, x, y) in enumerate(arrays):
        same = next((other for other, ox, oy in arrays[:i] if ox.shape == x.shape
                     and np.allclose(ox, x, rtol=1e-9, atol=0, equal_nan=True)
                     and np.allclose(oy, y, rtol=1e-9, atol=0, equal_nan=True)), None)
        labels.append(label if same is None else f"{label} (= {same})")
    return labels


OFFSETS = ((4, 3), (4, -3), (-4, 3), (-4, -3), (4, 11), (-4, 11), (4, -11), (-4, -11))  # points from the point
MARKER_PT = 7.0  # a marker's size, points (matplotlib's default 6, and its edge)


def label_points(ax, labels, marker_pt: float = MARKER_PT, **style) -> int:
    """Put each of ``labels`` (x, y in data units, its text, its own style: a dict) at the first of ``OFFSETS``
    from its point where it prints inside the axes, over no label placed before it and over no labelled point's
    marker (a square of ``marker_pt`` points around each, of every series: a label on another line's marker reads
    as that one's);
    one with no such place is left out. Draws the figure first (a box is where it prints; the labels take no
    part in the layout). Returns how many were left out."""
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    half = marker_pt / 2 * fig.dpi / 72
    markers = [Bbox.from_extents(px - half, py - half, px + half, py + half)
               for px, py in ax.transData.transform([(x, y) for x, y, _, _ in labels]) if np.isfinite(px + py)]
    kept, left_out, frame = list(markers), 0, ax.get_window_extent(renderer)
    for x, y, text, own in labels:
        for dx, dy in OFFSETS:
            label = ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), in_layout=False,
                                ha="left" if dx > 0 else "right", va="bottom" if dy > 0 else "top", **{**style, **own})
            box = label.get_window_extent(renderer)
            if inside(box, frame) and not any(box.overlaps(other) for other in kept):
                kept.append(box)
                break
            label.remove()
        else:
            left_out += 1
    return left_out


def inside(box, frame) -> bool:
    """Whether ``box`` lies within ``frame`` (display units): a label past the axes prints over the tick labels."""
    return frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
