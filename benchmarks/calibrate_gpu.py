"""Fit the GPU time model's parameters (attnio.hardware.timing.BOUNDS) to the calibration set.

    python benchmarks/calibrate_gpu.py [--train PATH] [--write] [--json]

Reads ``shared/data/gpu-published/train.csv`` (default: the ``shared`` folder next to the
repository root, as the developers' checkout lays it out), prepares every row once (the traffic,
the L2 replay and the per-CTA unit amounts do not depend on the parameters), then fits the 8
bounded parameters of the sm90 generation with ``scipy.optimize.least_squares`` on the log of
predicted over measured time (:func:`attnio.hardware.calibrate.fit`, the same fit ``attnio gpu
calibrate`` runs on a user's measurements), and prints the fit: each parameter with its bounds, the mean,
median and max |time error|.  ``--write`` stores the fit with its provenance (the file's SHA-256,
the row count, the date, scipy's version, the errors) in
``src/attnio/hardware/calibration.json``; sm80 (A100: no timings to fit) is written from the rule
in that file's ``provenance``.

Only the calibration set is read: the validation set (other head dimensions, other GPUs,
independent benchmarks) is kept outside the project and never fitted to.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnio.hardware.calibrate import START, errors, fit  # noqa: E402,F401 (the fit itself)
from attnio.hardware.timing import BOUNDS, PARAMS  # noqa: E402
from attnio.hardware.validate import load_rows, prepare_rows  # noqa: E402

DEFAULT_TRAIN = ROOT.parent / "shared" / "data" / "gpu-published" / "train.csv"
OUT = ROOT / "src" / "attnio" / "hardware" / "calibration.json"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", default=str(DEFAULT_TRAIN),
                    help="the calibration set (default: ../shared/data/gpu-published/train.csv "
                         "from the repository root)")
    ap.add_argument("--write", action="store_true", help="store the fit in calibration.json")
    ap.add_argument("--json", action="store_true", help="print the fit as JSON")
    a = ap.parse_args(argv)
    path = Path(a.train)
    if not path.is_file():
        print(f"calibrate_gpu: error: --train {path}: no such file (the calibration set lives "
              "in shared/data/gpu-published/train.csv next to the repository; give its path "
              "with --train)", file=sys.stderr)
        return 2
    t0 = time.process_time()
    rows = load_rows(path)
    prepped = prepare_rows(rows)
    measured = np.array([r.time_s for r in rows])
    t_prep = time.process_time() - t0
    p, res = fit(prepped, measured)
    err = errors(prepped, measured, p)
    ae = np.abs(err)
    summary = {"mean_abs_err": float(ae.mean()), "median_abs_err": float(np.median(ae)),
               "max_abs_err": float(ae.max()), "rows": len(rows),
               "prepare_cpu_s": round(t_prep, 2),
               "fit_cpu_s": round(time.process_time() - t0 - t_prep, 2),
               "evaluations": int(res.nfev)}
    if a.json:
        print(json.dumps({"params": p.__dict__, "summary": summary}, indent=1))
    else:
        print(f"{'parameter':<14} {'value':>10}   bounds")
        for k in PARAMS:
            lo, hi, unit, _ = BOUNDS[k]
            print(f"{k:<14} {getattr(p, k):>10.4g}   [{lo:g}, {hi:g}] {unit}")
        print(f"calibration set: {len(rows)} rows; |time error| mean {ae.mean():.1%}, median "
              f"{np.median(ae):.1%}, max {ae.max():.1%} ({res.nfev} evaluations, "
              f"{summary['fit_cpu_s']} s CPU fit, {t_prep:.1f} s CPU preparing)")
    if a.write:
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        import scipy

        fitted = {k: round(float(getattr(p, k)), 6) for k in PARAMS}
        sm80 = dict(fitted)
        sm80["mma_sync_eff"] = fitted["wgmma_eff"]
        table = {
            "generations": {
                "sm90": {"params": fitted, "provenance": {
                    "fitted_to": "shared/data/gpu-published/train.csv",
                    "sha256": sha, "rows": len(rows), "script": "benchmarks/calibrate_gpu.py",
                    "method": "scipy.optimize.least_squares on log(predicted/measured time), "
                              "bounds of attnio.hardware.timing.BOUNDS",
                    "scipy": scipy.__version__,
                    "date": datetime.date.today().isoformat(), **summary}},
                "sm80": {"params": sm80, "provenance": {
                    "fitted_to": None,
                    "rule": "A100 has no published timings in the calibration set. mma_sync_eff "
                            "= sm90's wgmma_eff (mma.sync is Ampere's native MMA path: assumed "
                            "to sustain the share of peak Hopper's native path sustains); the "
                            "other parameters are sm90's (the same flash-attn sources and "
                            "PyTorch kernels). Not measured: docs/hardware.md, 'Validation'."}},
            },
            "bounds": {k: list(v[:3]) for k, v in BOUNDS.items()},
        }
        OUT.write_text(json.dumps(table, indent=1) + "\n")
        print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
