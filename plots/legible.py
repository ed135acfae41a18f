"""What keeps a figure readable where its data crowd: lines drawn over one another said so in the legend, and point
labels that would print over one another left out."""

from __future__ import annotations

import numpy as np

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")  # told apart where colours are not


def coinciding(series: list[tuple[str, list, list]]) -> list[str]:
    """The legend labels of ``series`` (label, x, y), each drawn exactly under an earlier one (the same points,
    to 1e-9 relative) marked ``(= that one)``: a line that hides under another still says where it is."""
    labels = []
    for i, (label, x, y) in enumerate(series):
        same = next((other for other, ox, oy in series[:i] if len(ox) == len(x) and np.allclose(ox, x, rtol=1e-9)
                     and np.allclose(oy, y, rtol=1e-9)), None)
        labels.append(label if same is None else f"{label} (= {same})")
    return labels


def drop_overlapping(fig, texts: list) -> int:
    """Hide each of ``texts`` (matplotlib Text, in priority order) whose box on the drawn figure overlaps one kept
    before it; returns how many were hidden."""
    renderer = fig.canvas.get_renderer()
    kept, hidden = [], 0
    for text in texts:
        box = text.get_window_extent(renderer)
        if any(box.overlaps(other) for other in kept):
            text.set_visible(False)
            hidden += 1
        else:
            kept.append(box)
    return hidden
