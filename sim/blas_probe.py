"""numba's probe for a BLAS, left out of the processes moesim owns: 0.17 s of a warm ``moesim plan``.

A process's first compiled call (one loaded from numba's disk cache too) loads numba's registries of NumPy
functions. One of them, ``numba.np.arraymath``, probes for a BLAS when it is imported, by importing SciPy's
``linalg`` (``numba.np.linalg.ensure_blas``), so that compiled ``np.correlate`` and ``np.convolve`` take BLAS
inner products (0.17 s: the import of ``numba.np.arraymath`` took 0.18 s with it, 0.01 s without). moesim's
compiled code calls neither. ``skip`` has that probe find no BLAS; ``numba.np.linalg.ensure_blas`` is then put
back, so ``np.dot`` and numba's linear algebra still check for SciPy when they are compiled (``arraymath`` keeps
the stand-in, which it calls only at its import). It is called where moesim owns the process (the installed
command, the compile and sweep workers), not on import: in a process that imports moesim as a library, the user's
own compiled ``np.correlate`` would lose its BLAS.
"""

from __future__ import annotations

import sys


def skip() -> None:
    """Import ``numba.np.arraymath`` with its BLAS probe finding none (nothing done if it is imported already)."""
    if "numba.np.arraymath" in sys.modules:
        return
    from numba.np import linalg

    probe = linalg.ensure_blas

    def none_found() -> None:
        raise ImportError("not probed: moesim's compiled code calls no BLAS")

    linalg.ensure_blas = none_found
    try:
        import numba.np.arraymath  # noqa: F401 (its probe runs now)
    finally:
        linalg.ensure_blas = probe
