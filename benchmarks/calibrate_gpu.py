"""Fit the GPU time model's parameters (attnio.hardware.timing.BOUNDS) to the calibration set.

    python benchmarks/calibrate_gpu.py [--train PATH] [--write] [--json]

Reads ``shared/data/gpu-published/train.csv`` (default: the ``shared`` folder next to the
repository root, as the developers' checkout lays it out), prepares every row once (the traffic,
the L2 replay and the per-CTA unit amounts do not depend on the parameters), then fits the 8
bounded parameters of each architecture generation separately (``timing.FITTED``: sm90 from the
H100 rows, 10 parameters; sm80 from the A100 rows, 7: Ampere has no wgmma and no FA3) with
``scipy.optimize.least_squares`` on the log of predicted over measured time, and prints each fit:
every parameter with its bounds, the mean, median and max |time error|.  ``--write`` stores the
fits with their provenance (the file's SHA-256, the rows, the date, scipy's version, the errors)
in ``src/attnio/hardware/calibration.json``.

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

from attnio.hardware import calibrate as _calibrate  # noqa: E402 (the fit ``gpu calibrate`` runs)
from attnio.hardware import devices  # noqa: E402
from attnio.hardware.calibrate import START, errors  # noqa: E402
from attnio.hardware.timing import BOUNDS, FITTED, PARAMS, generation  # noqa: E402
from attnio.hardware.validate import load_rows, prepare_rows  # noqa: E402

DEFAULT_TRAIN = ROOT.parent / "shared" / "data" / "gpu-published" / "train.csv"
OUT = ROOT / "src" / "attnio" / "hardware" / "calibration.json"


def fit(prepped, measured: np.ndarray, names: tuple[str, ...], fixed: dict[str, float]):
    """Fit ``names`` (the others held at ``fixed``) on log(predicted / measured): the library's
    fit (:func:`attnio.hardware.calibrate.fit`), the one ``attnio gpu calibrate`` runs."""
    return _calibrate.fit(prepped, measured, start=fixed, free=names)


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
    gens: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        gens.setdefault(generation(devices.get(r.device)), []).append(i)
    prepped_all = prepare_rows(rows)
    t_prep = time.process_time() - t0
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    fits: dict[str, dict] = {}
    fixed = dict(START)
    for gen in sorted(gens, key=lambda g: g != "sm90"):   # sm90 first: sm80 keeps its others
        if gen not in FITTED:
            print(f"calibrate_gpu: no parameter list for generation {gen}: its "
                  f"{len(gens[gen])} rows are skipped", file=sys.stderr)
            continue
        idx = gens[gen]
        prepped = [prepped_all[i] for i in idx]
        measured = np.array([rows[i].time_s for i in idx])
        t1 = time.process_time()
        p, res = fit(prepped, measured, FITTED[gen], fixed)
        if gen == "sm90":
            fixed = {k: getattr(p, k) for k in PARAMS}
        ae = np.abs(errors(prepped, measured, p))
        summary = {"mean_abs_err": float(ae.mean()), "median_abs_err": float(np.median(ae)),
                   "max_abs_err": float(ae.max()), "rows": len(idx),
                   "fit_cpu_s": round(time.process_time() - t1, 2), "evaluations": int(res.nfev)}
        fits[gen] = {"params": p, "summary": summary}
        if not a.json:
            devs = sorted({rows[i].device for i in idx})
            print(f"{gen} ({', '.join(devs)}): {'parameter':<14} {'value':>10}   bounds")
            for k in PARAMS:
                lo, hi, unit, _ = BOUNDS[k]
                tag = "" if k in FITTED[gen] else "   (not fitted: unused by this generation)"
                print(f"     {k:<14} {getattr(p, k):>10.4g}   [{lo:g}, {hi:g}] {unit}{tag}")
            print(f"     {len(idx)} rows; |time error| mean {ae.mean():.1%}, median "
                  f"{np.median(ae):.1%}, max {ae.max():.1%} ({res.nfev} evaluations, "
                  f"{summary['fit_cpu_s']} s CPU)")
    if a.json:
        print(json.dumps({g: {"params": f["params"].__dict__, "summary": f["summary"]}
                          for g, f in fits.items()}, indent=1))
    else:
        print(f"prepared {len(rows)} rows in {t_prep:.1f} s CPU")
    if a.write:
        import scipy

        table: dict = {"generations": {}, "bounds": {k: list(v[:3]) for k, v in BOUNDS.items()}}
        for gen, f in fits.items():
            p = f["params"]
            table["generations"][gen] = {
                "params": {k: round(float(getattr(p, k)), 6) for k in PARAMS},
                "fitted": list(FITTED[gen]),
                "provenance": {
                    "fitted_to": "shared/data/gpu-published/train.csv",
                    "devices": sorted({rows[i].device for i in gens[gen]}),
                    "sha256": sha, "script": "benchmarks/calibrate_gpu.py",
                    "method": "scipy.optimize.least_squares on log(predicted/measured time) "
                              "over this generation's rows only, bounds of "
                              "attnio.hardware.timing.BOUNDS; the parameters not in 'fitted' "
                              "do not enter this generation's kernels (kept at sm90's)",
                    "scipy": scipy.__version__, "date": datetime.date.today().isoformat(),
                    "prepare_cpu_s": round(t_prep, 2), **f["summary"]}}
        OUT.write_text(json.dumps(table, indent=1) + "\n")
        print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
