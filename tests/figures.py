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
