"""Learning curves, in the spirit of `tensorflow_docs.plots`.

Example:
    >>> history = model.fit(train, validation_data=test, epochs=5)
    >>> from course_utils import plots
    >>> plots.plot_history(history)                       # loss and accuracy, train vs validation
    >>> plots.plot_history({"loss": losses, "accuracy": accs})   # a custom loop's own records
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
            ax.plot(
                epochs, records[f"val_{metric}"], marker="o", linestyle="--", label="validation"
            )
        ax.set_xlabel("epoch")
        ax.set_ylabel(metric)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
