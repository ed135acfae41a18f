"""What a figure test checks of what is drawn: the text a reader sees does not print over other text."""

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text


def overlapping_texts(fig) -> list[tuple[str, str]]:
    """Pairs of the non-empty texts ``fig`` draws (titles, axis and tick labels, legend entries, annotations,
    cell values) whose boxes overlap. Only what the renderer draws counts: a tick label outside the axis' range
    or on a hidden panel exists and is not drawn."""
    drawn, draw = [], Text.draw

    def record(text, renderer):
        draw(text, renderer)
        if text.get_visible() and text.get_text().strip():
            drawn.append((text.get_text(), text.get_window_extent(renderer)))

    Text.draw = record
    try:
        FigureCanvasAgg(fig).draw()  # a saved figure is closed: draw it again
    finally:
        Text.draw = draw
    return [(a, b) for i, (a, box) in enumerate(drawn) for b, other in drawn[i + 1:]
            if box.width and other.width and box.overlaps(other)]


def labels_off_the_data(ax, marker_pt: float = 6.0) -> list[str]:
    """The point labels (annotations) of ``ax`` that print over a marker of any of its lines (a square of
    ``marker_pt`` points around each point) or past the axes: a label on another line's marker reads as that one's."""
    fig = ax.figure
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    half = marker_pt / 2 * fig.dpi / 72
    points = [ax.transData.transform(xy) for line in ax.get_lines() if line.get_marker() not in (None, "None", "")
              for xy in line.get_xydata()]
    frame = ax.get_window_extent(renderer)
    wrong = []
    for text in ax.texts:
        box = text.get_window_extent(renderer)
        past = box.x0 < frame.x0 or box.x1 > frame.x1 or box.y0 < frame.y0 or box.y1 > frame.y1
        if past or any(box.x0 < px + half and px - half < box.x1 and box.y0 < py + half and py - half < box.y1
                       for px, py in points):
            wrong.append(text.get_text())
    return wrong
