"""Writes variants of backend/sparse_mla.py for same-run A/B sweeps (`bench.py --kernel`), so an
experiment's kernel is reproducible from the repository rather than kept as a hand-edited copy.

    python3 benchmarks/sparse_mla/kernel_variants.py pdl-late .thirdparty/exp/pdl_late.py

Variants (each asserts that it changed what it meant to):
  pdl-late  the Gluon split kernels let the merge launch after their main loop instead of at
            their start (the merge's programs, launched early, pile onto the SMs the split grid
            leaves idle: NOTES.md round 7), so they land as the split programs finish;
  pdl-exit  no explicit trigger: the merge launches as the split programs exit, its launch
            overlapping their last memory traffic (plan r27p compares the three).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

KERNEL = Path(__file__).resolve().parents[2] / "backend" / "sparse_mla.py"
GLUON_SPLIT_KERNELS = 5  # the Gluon kernels that trigger the merge's launch

_EARLY_TRIGGER = re.compile(r"(        if USE_PDL:\n)            _wg_launch_dependents\(\)[^\n]*\n")
_MAIN_LOOP_DRAINED = re.compile(r"(?m)^        async_copy\.wait_group\(0\)\n")


def _without_early_trigger(source: str) -> str:
    """``source`` with each Gluon split kernel's trigger at its start taken out."""
    dropped = r"\1            pass  # the trigger moved or dropped\n"
    source, count = _EARLY_TRIGGER.subn(dropped, source)
    assert count == GLUON_SPLIT_KERNELS, f"{count} early triggers, expected {GLUON_SPLIT_KERNELS}"
    return source


def pdl_late(source: str) -> str:
    """The trigger after each Gluon split kernel's main loop, once its gathers have drained."""
    late = (
        "        async_copy.wait_group(0)\n"
        "        if USE_PDL:\n"
        "            _wg_launch_dependents()  # the merge may launch: the main loop is done\n"
    )
    source, count = _MAIN_LOOP_DRAINED.subn(late, _without_early_trigger(source))
    assert count == GLUON_SPLIT_KERNELS, f"{count} main loops, expected {GLUON_SPLIT_KERNELS}"
    return source


def pdl_exit(source: str) -> str:
    """No trigger: a grid's programs trigger their dependent's launch as they exit."""
    return _without_early_trigger(source)


VARIANTS = {"pdl-late": pdl_late, "pdl-exit": pdl_exit}


def main() -> None:
    """Writes the named variant of backend/sparse_mla.py to ``out``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variant", choices=sorted(VARIANTS))
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(VARIANTS[args.variant](KERNEL.read_text()))
    print(f"{args.out}: {args.variant} of {KERNEL}")


if __name__ == "__main__":
    main()
