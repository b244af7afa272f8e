import jax.numpy as jnp
import matplotlib
import numpy as np
import pytest

import eqx_qd as q
from eqx_qd import _metrics, plotting


matplotlib.use("Agg")


def _filled(tessellation, fitnesses):
    """A repertoire whose cell i holds fitness ``fitnesses[i]`` (NaN: left empty)."""
    rep = q.MAPElitesRepertoire.empty(tessellation, jnp.zeros(1))
    keep = np.flatnonzero(np.isfinite(fitnesses))
    descriptors = jnp.asarray(np.asarray(tessellation.centroids)[keep])
    rep, _ = rep.add(jnp.zeros((keep.size, 1)), descriptors, jnp.asarray(fitnesses[keep]))
    return rep


def _image(fig):
    (image,) = fig.axes[0].get_images()
    return image


def test_non_square_grid_with_per_axis_bounds_is_drawn_cell_by_cell():
    # 3 x 5 bins over x in [0, 3], y in [-1, 1]: each pixel must show its own cell's fitness.
    grid = q.GridTessellation((3, 5), minval=[0.0, -1.0], maxval=[3.0, 1.0])
    fit = np.arange(15, dtype=np.float32)
    fit[7] = np.nan
    fig = plotting.plot_repertoire(_filled(grid, fit), resolution=30)
    image = _image(fig)
    assert image.get_extent() == [0.0, 3.0, -1.0, 1.0]
    pixels = np.ma.filled(image.get_array(), np.nan)  # rows: y, columns: x
    centres = (np.arange(30) + 0.5) / 30
    xs, ys = 3 * centres, -1 + 2 * centres
    cell = lambda x, y: int(x // 1) * 5 + int((y + 1) // 0.4)
    expected = np.array([[fit[cell(x, y)] for x in xs] for y in ys])
    np.testing.assert_array_equal(pixels, expected)
    assert fig.axes[0].get_xlabel() == "descriptor 1"


def test_colour_limits_labels_and_bounds_are_the_caller_s():
    grid = q.GridTessellation((4, 4))
    rep = _filled(grid, np.linspace(1.0, 2.0, 16, dtype=np.float32))
    fig = plotting.plot_repertoire(
        rep, vmin=0.0, vmax=10.0, descriptor_names=("speed", "height"), bounds=(0.0, [2.0, 1.0])
    )
    image = _image(fig)
    assert image.get_clim() == (0.0, 10.0)
    assert image.get_extent() == [0.0, 2.0, 0.0, 1.0]
    assert (fig.axes[0].get_xlabel(), fig.axes[0].get_ylabel()) == ("speed", "height")
    default = _image(plotting.plot_repertoire(rep))
    assert default.get_clim() == (1.0, 2.0)  # the values' own range
    with pytest.raises(ValueError, match="descriptor_names must hold 2 names"):
        plotting.plot_repertoire(rep, descriptor_names=("speed",))
    with pytest.raises(ValueError, match=r"bounds\[1\] must be a scalar or 2 values"):
        plotting.plot_repertoire(rep, bounds=(0.0, [1.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="low < high"):
        plotting.plot_repertoire(rep, bounds=(1.0, 1.0))


def test_cvt_plots_are_not_cropped_to_the_centroids():
    centroids = np.array([[0.2, 0.2], [0.8, 0.2], [0.2, 0.8], [0.8, 0.8]], np.float32)
    rep = _filled(q.CVTTessellation(centroids), np.arange(4, dtype=np.float32))
    x0, x1, y0, y1 = _image(plotting.plot_repertoire(rep)).get_extent()
    # Padded by half a cell's width: range 0.6 over 2 cells a side, so 0.15 beyond each side.
    assert x0 < 0.2 and x1 > 0.8 and y0 < 0.2 and y1 > 0.8
    np.testing.assert_allclose([x0, x1, y0, y1], [0.05, 0.95, 0.05, 0.95])


def test_more_than_two_descriptors_get_one_panel_per_pair():
    cube = q.GridTessellation((2, 2, 2))
    fit = np.arange(8, dtype=np.float32)
    fit[3] = np.nan
    fig = plotting.plot_repertoire(_filled(cube, fit), vmin=0.0, vmax=7.0)
    panels = [a for a in fig.axes if a.collections and a.get_label() != "<colorbar>"]
    assert len(panels) == 3  # (1, 2), (1, 3), (2, 3)
    for panel in panels:
        (points,) = panel.collections
        assert len(points.get_offsets()) == 7  # the filled cells
        assert points.get_clim() == (0.0, 7.0)
    with pytest.raises(ValueError, match="draws its own figure"):
        plotting.plot_repertoire(_filled(cube, fit), ax=fig.axes[0])


def test_metric_curves_read_against_a_second_axis_on_top():
    history = {k: np.linspace(0.0, 1.0, 5) for k in _metrics.METRIC_NAMES}
    history.update(evaluations=np.arange(1.0, 6.0) * 100, env_steps=np.arange(1.0, 6.0) * 1e4)
    fig = plotting.plot_metrics(history, "evaluations", "env_steps")
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert len(panels) == 4 and all(ax.get_xlabel() == "evaluations" for ax in panels)
    tops = [child for ax in panels for child in ax.child_axes]  # the secondary axes
    assert len(tops) == 4 and tops[0].get_xlabel() == "env_steps"
    ticks = tops[0].get_xticks()  # within the logged range: the mapping is flat beyond it
    assert len(ticks) >= 2 and ticks.min() >= 1e4 and ticks.max() <= 5e4
    with pytest.raises(ValueError, match="'env_steps' must grow with 'evaluations'"):
        plotting.plot_metrics({**history, "env_steps": history["env_steps"][::-1]},
                              "evaluations", "env_steps")  # fmt: skip
    assert len(plotting.plot_metrics(history).axes) == 4  # no second axis unless asked


@pytest.mark.parametrize("d", [1, 2, 4])
def test_a_repertoire_without_cells_is_drawn_as_its_elites(d):
    rep = q.DNSRepertoire.empty(10, jnp.zeros(()), d)
    descriptors = jnp.asarray(np.random.default_rng(0).uniform(size=(6, d)), jnp.float32)
    fit = jnp.asarray([1.0, 2.0, 3.0, jnp.nan, 5.0, 6.0])
    rep, _ = rep.add(jnp.zeros(6), descriptors, fit)
    fig = plotting.plot_repertoire(rep)
    panels = [a for a in fig.axes if a.collections and a.get_label() != "<colorbar>"]
    assert len(panels) == {1: 1, 2: 1, 4: 6}[d]
    for panel in panels:
        (points,) = panel.collections
        assert len(points.get_offsets()) == 5  # the NaN candidate was never stored
    assert "5/10 slots filled" in (fig._suptitle.get_text() if d > 2 else panels[0].get_title())
