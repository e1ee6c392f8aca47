"""The figure every drawing draws on, and the blitting that redraws only what moves."""

from __future__ import annotations

from typing import Any

__all__ = ["Backdrop", "new_figure"]


def new_figure(size: tuple[float, float]) -> Any:
    """A matplotlib figure on its own Agg canvas (100 dpi; pyplot's state untouched)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, dpi=100)
    FigureCanvasAgg(figure)
    return figure


class Backdrop:
    """Blitting: what does not move is drawn once per ``key``, the moving artists over it.

    ``draw(key, moving)`` leaves the frame in the figure's canvas: when ``key``
    (what the still part depends on: limits, labels) equals the last one, the
    saved still part is restored and only ``moving`` is drawn on it (in zorder);
    otherwise the figure is drawn without ``moving``, saved, and ``moving``
    drawn over it. ``key=None`` draws the whole figure. On 3-D axes the moving
    artists are drawn in zorder, not sorted by depth.
    """

    def __init__(self, figure: Any) -> None:
        self.figure = figure
        self._key: Any = None
        self._saved: Any = None

    def draw(self, key: Any, moving: list[Any]) -> None:
        canvas = self.figure.canvas
        if key is None:
            for artist in moving:
                artist.set_animated(False)
            canvas.draw()
            return
        for artist in moving:
            artist.set_animated(True)
        if self._saved is None or key != self._key:
            canvas.draw()  # everything but the moving artists
            self._saved, self._key = canvas.copy_from_bbox(self.figure.bbox), key
        else:
            canvas.restore_region(self._saved)
        for artist in sorted(moving, key=lambda artist: artist.get_zorder()):
            if hasattr(artist, "do_3d_projection"):  # as Axes3D.draw does before drawing
                artist.do_3d_projection()
            self.figure.draw_artist(artist)
