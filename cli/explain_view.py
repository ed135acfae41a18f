"""An ``Explanation`` (``moesim.sim.explain``) as ``sim run --explain`` and ``plan --explain N`` print it."""

from moesim.cli.console import console, table


def show(title: str, e) -> None:
    """The step's parts (adding up to TPOT), what ran beside them, what binds, and the constants with sources."""
    table(f"{title}: a decode step, part by part (ms); they add up to TPOT {e.tpot_ms:.4g} ms",
          ["part", "ms", "share", "note"],
          [[line.what, line.value, line.value / e.tpot_ms if e.tpot_ms else float("nan"), line.source]
           for line in e.step if line.value or not line.source])
    for line in e.beside:
        console.print(f"beside it: {line.what} {line.value:.4g} ms a step ({line.source})", soft_wrap=True)
    console.print(f"binds: {e.binds}", soft_wrap=True)
    console.print("the constants behind them:")
    for line in e.constants:
        console.print(f"  {line.what}: {line.value:.4g} {line.unit} ({line.source})", soft_wrap=True)
