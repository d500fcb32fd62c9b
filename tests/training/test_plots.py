"""The run's accuracy plots do not stretch chance-level noise into a learning curve."""

import types

import pytest

from privzv.training import plots


@pytest.mark.parametrize("epsilon", [float("inf"), 2.0])
def test_accuracy_axis_is_full_scale_with_chance_marked(tmp_path, monkeypatch, epsilon):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seen = []
    monkeypatch.setattr(plt, "close", lambda fig: seen.append(fig))
    rows = [
        {"round": r, "test_accuracy": a, "bytes_up": 10 * r, "bytes_down": r}
        for r, a in ((1, 0.07), (2, 0.105), (3, 0.09))
    ]  # chance-level wobble
    config = types.SimpleNamespace(
        method="dpzv",
        dataset="digits",
        devices=4,
        epsilon=epsilon,
        delta=1e-5,
        threat="device",
        sigma=None,
        freeze=None,
    )
    plots.write(tmp_path, rows, config, chance=plots.chance([0, 1, 1, 2]))
    monkeypatch.undo()
    assert len(seen) == 2 and (tmp_path / "accuracy_vs_rounds.png").is_file()
    for fig in seen:
        ax = fig.axes[0]
        assert ax.get_ylim() == (0, 100)
        lines = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
        assert len(lines) == 1 and lines[0].get_ydata()[0] == pytest.approx(50.0)
        assert lines[0].get_label().startswith("majority class")
        want = "no noise" if epsilon == float("inf") else "epsilon 2, delta 1e-05, threat device"
        assert want in ax.get_title()
        plt.close(fig)


def test_chance_is_the_majority_label_share():
    assert plots.chance([3, 3, 3, 1]) == pytest.approx(75.0)
