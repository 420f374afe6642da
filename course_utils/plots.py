"""Charts, in the spirit of `tensorflow_docs.plots`: learning curves and training speeds.

Example (with a notebook's model, datasets and records):

    from course_utils import plots

    history = model.fit(train, validation_data=test, epochs=5)
    plots.plot_history(history)  # loss and accuracy, train vs validation
    plots.plot_history({"loss": losses, "accuracy": accs})  # a custom loop's own records
    plots.plot_comparison(results)  # timing.RunResults: speed bars, each round a dot
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def plot_history(history, metrics: Sequence[str] = ("loss", "accuracy"), title: str | None = None):
    """One panel per metric, with the `val_` curve beside the training curve when present.

    history: a keras History (from `fit`) or a dict of metric name -> list of per-epoch values.
    Returns the matplotlib figure.
    """
    import matplotlib.pyplot as plt

    records: Mapping[str, Sequence[float]] = getattr(history, "history", history)
    shown = [m for m in metrics if m in records]
    if not shown:
        raise ValueError(f"None of {list(metrics)} is in the history; it has {sorted(records)}.")
    fig, axes = plt.subplots(1, len(shown), figsize=(5 * len(shown), 3.5), squeeze=False)
    for ax, metric in zip(axes[0], shown):
        epochs = range(1, len(records[metric]) + 1)
        ax.plot(epochs, records[metric], marker="o", label="train")
        if f"val_{metric}" in records:
            validation = records[f"val_{metric}"]
            ax.plot(epochs, validation, marker="o", linestyle="--", label="validation")
        ax.set_xlabel("epoch")
        ax.set_ylabel(metric)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_comparison(results: Sequence, title: str = ""):
    """Horizontal bars of examples/s per timing.RunResult, each labelled with its value past the
    bar's end; a run's rounds, when it has them, are dots on its bar. Returns the axes."""
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=(7, 0.8 + 0.5 * len(results)))
    values = [r.examples_per_sec for r in results]
    ax.barh([r.name for r in results], values, color="tab:blue", alpha=0.8)
    for row, (result, value) in enumerate(zip(results, values)):
        ax.plot(result.rounds, [row] * len(result.rounds), "o", color="black", markersize=3)
        # The label starts right of the bar and of every round, so nothing is drawn over it.
        ax.annotate(
            f"{value:,.0f}",
            xy=(max([value, *result.rounds]), row),
            xytext=(5, 0),
            textcoords="offset points",
            va="center",
        )
    ax.invert_yaxis()
    ax.margins(x=0.18)
    ax.set_xlim(left=0)
    ax.set_xlabel("examples per second (higher is faster)")
    ax.set_title(title or "Training speed")
    ax.spines[["top", "right"]].set_visible(False)
    return ax
