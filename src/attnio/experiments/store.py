"""The results store: one SQLite database of sweep rows, keyed by a configuration hash.

A row is one configuration (algorithm, sizes, M, mask, mode, seed, eps) and what became of it:
``status`` is ``"ok"`` (it ran: every count, the tiling, the bounds, the ratio, the error in compute
mode, the wall time), ``"skipped"`` (the algorithm cannot run this configuration; ``reason`` says
why, e.g. ``M=64 < min_M=260``) or ``"error"`` (it raised; ``reason`` holds the message, and a rerun
tries it again).  Skipped configurations live in the same table as the results, so a sweep's
coverage is one query away.

The key is :func:`attnio.experiments.sweep.Config.hash` (what was asked, not the library version, which every
row records in ``version``).  The database is opened in WAL mode and every batch of rows is written
in one transaction, so a sweep killed at any instant leaves only whole rows, and a restart skips the
rows already present: no lost and no duplicated row.

Safety: the store refuses, with one line and without writing anything, a file that is not SQLite
(a foreign or corrupted file), an SQLite database that is not an attnio results store, a store of
another schema version, and a path it cannot write.  It never overwrites an existing file.  A
database damaged inside (a malformed page) or locked by another process (an open transaction, a
sweep still writing) raises :class:`StoreError` naming the file and what to do, whatever call
meets it, instead of sqlite3's own exception; a lock is waited on for a short while only
(``lock_timeout``), in small interruptible steps.

>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "r.sqlite")
>>> with ResultsStore(path) as st:
...     st.insert([{"config_hash": "ab", "status": "skipped", "reason": "demo", "algorithm": "x"}])
...     [r["reason"] for r in st.rows()]
1
['demo']
"""

from __future__ import annotations

import csv
import functools
import json
import math
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.errors import AttnioError, ParameterError
from ..core.extras import available, require
from ..core.paths import kind_of

__all__ = ["COLUMNS", "MIGRATES", "SCHEMA_VERSION", "ResultsStore", "StoreError", "export_target",
           "read_export"]

SCHEMA_VERSION = 3  # 2: workload columns (heads, mask alignment, window) and verify columns;
#                    3: the backward pass and its certificate (backward_* columns)
#: Older schema versions a store migrates when it opens them for writing (their rows keep
#: working: the new columns read NULL) and reads as they are.
MIGRATES = ("2",)
_SQLITE_MAGIC = b"SQLite format 3\x00"

#: (name, SQLite type) of every column of the ``results`` table, in order.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("config_hash", "TEXT"),
    ("status", "TEXT"),       # ok | skipped | error
    ("reason", "TEXT"),       # why skipped / the error message
    ("algorithm", "TEXT"),
    ("kind", "TEXT"),         # attention | matmul | ...
    ("exact", "INTEGER"),     # 1 exact, 0 approximate
    ("Nq", "INTEGER"),
    ("Nkv", "INTEGER"),
    ("d", "INTEGER"),
    ("M", "INTEGER"),
    ("causal", "INTEGER"),    # 1 masked (see causal_align), 0 not
    ("causal_align", "TEXT"), # bottom_right | top_left | NULL (unmasked)
    ("batch", "INTEGER"),
    ("heads", "INTEGER"),     # query heads per batch element
    ("kv_heads", "INTEGER"),  # key/value heads per batch element (heads % kv_heads == 0)
    ("window", "INTEGER"),    # sliding window (NULL: none)
    ("mode", "TEXT"),         # count | compute
    ("seed", "INTEGER"),
    ("eps", "REAL"),
    ("entry_bound", "REAL"),  # approximate algorithms: |Q|, |K| <= entry_bound
    ("reads", "INTEGER"),
    ("writes", "INTEGER"),
    ("total", "INTEGER"),
    ("peak", "INTEGER"),
    ("steps", "INTEGER"),
    ("per_array", "TEXT"),    # JSON {array: [reads, writes]}
    ("predicted_reads", "INTEGER"),   # the algorithm's closed form
    ("predicted_writes", "INTEGER"),
    ("tiling", "TEXT"),       # JSON of the Tiling dataclass
    ("bounds", "TEXT"),       # JSON {name: {value, theorem, explicit, assumptions}}
    ("bound", "REAL"),        # the largest applicable explicit bound
    ("bound_name", "TEXT"),
    ("ratio", "REAL"),        # total / bound
    ("floor", "INTEGER"),     # read-once floor: inputs read once + output written once
    ("max_err", "REAL"),      # compute mode: max |O - reference|
    ("lru_M", "INTEGER"),     # --verify: LRU replay of the element trace with M words
    ("opt_M", "INTEGER"),     # --verify: Belady-optimal replay with M words
    ("lru_2M", "INTEGER"),    # --verify: LRU with 2M words
    ("opt_2M", "INTEGER"),    # --verify: OPT with 2M words
    ("trace_events", "INTEGER"),   # --verify: events in the trace
    ("verify_reason", "TEXT"),     # --verify: why the replay columns are null (else NULL)
    ("wall_s", "REAL"),
    ("version", "TEXT"),      # attnio version that produced the row
    ("created_at", "TEXT"),
    # schema 3: the backward pass (a grid with backward = true), its count and certificate
    ("backward", "INTEGER"),          # 1: the row counts the backward pass too
    ("backward_algorithm", "TEXT"),   # the backward schedule (least I/O for the workload and M)
    ("backward_reads", "INTEGER"),
    ("backward_writes", "INTEGER"),
    ("backward_total", "INTEGER"),
    ("backward_bound", "REAL"),       # the largest applicable explicit backward bound
    ("backward_bound_name", "TEXT"),
    ("backward_ratio", "REAL"),       # backward_total / backward_bound
)
#: The columns schema 3 added (appended: a migrated table has them last, in this order).
ADDED_IN_3 = tuple(c for c, _ in COLUMNS[COLUMNS.index(("backward", "INTEGER")):])
COLUMN_NAMES = tuple(c for c, _ in COLUMNS)
# an ok row whose verify columns were never attempted (a sweep without --verify wrote it): a run
# with --verify fills them in (the only case besides an error row where a stored row is replaced)
_UNVERIFIED = ("({t}.status = 'ok' AND {t}.lru_M IS NULL AND {t}.verify_reason IS NULL "
               "AND {t}.trace_events IS NULL)")
_TYPES = dict(COLUMNS)


class StoreError(AttnioError):
    """The results database cannot be used (foreign, corrupted, other version, unwritable,
    locked)."""


#: Seconds a store waits for a lock another process holds before it gives up with a StoreError
#: (a concurrent sweep's transaction lasts milliseconds; an open transaction in a shell does not).
LOCK_TIMEOUT_S = 10.0
#: The same when the store is opened: the first check that the database can be written.
OPEN_LOCK_TIMEOUT_S = 0.5


def _locked(e: sqlite3.Error) -> bool:
    msg = str(e).lower()
    return isinstance(e, sqlite3.OperationalError) and ("locked" in msg or "busy" in msg)


def _db_error(path: str, e: sqlite3.Error) -> StoreError:
    """One line naming the file, what is wrong and what to do."""
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    if _locked(e):
        return StoreError(f"{path!r} is locked by another process (a sweep still writing to it, "
                          "or an open sqlite3 transaction); wait for it to finish or close it, "
                          "or use another --db")
    low = msg.lower()
    if (isinstance(e, sqlite3.DatabaseError) and not isinstance(e, sqlite3.OperationalError)
            or any(w in low for w in ("malformed", "not a database", "corrupt", "decode",
                                      "disk image"))):
        return StoreError(f"{path!r} is damaged ({msg[:80]}); move it aside and rerun the sweep "
                          "into a new --db (`sqlite3 FILE .recover` salvages the readable rows)")
    return StoreError(f"results database {path!r} cannot be used ({msg[:80]}); check the file "
                      "or use another --db")


def _guarded(fn: Callable) -> Callable:
    """Run a store method, turning sqlite3 errors into one-line StoreErrors; a lock is retried
    in small steps (Ctrl-C stays responsive) until ``lock_timeout`` seconds have passed."""

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        deadline = time.monotonic() + self.lock_timeout
        while True:
            try:
                return fn(self, *args, **kwargs)
            except sqlite3.Error as e:
                if _locked(e) and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                raise _db_error(self.path, e) from None

    return wrapper


def _check_file(path: str) -> None:
    """Refuse a path that exists but is not an SQLite file (never overwrite it)."""
    if os.path.isdir(path):
        raise StoreError(f"db path {path!r} is a directory, not a results database file")
    try:
        with open(path, "rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except PermissionError:
        raise StoreError(f"db path {path!r} is not readable") from None
    if head and head != _SQLITE_MAGIC:
        raise StoreError(
            f"{path!r} is not an SQLite database (a foreign or corrupted file); "
            "refusing to use or overwrite it"
        )


def _check_writable(path: str) -> None:
    if os.path.islink(path) and not os.path.exists(path):
        raise StoreError(f"db path {path!r} is a symbolic link to {os.readlink(path)!r}, which "
                         "does not exist (a dangling link or a loop); use another --db")
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            raise StoreError(f"db path {path!r} is not writable")
        if not os.access(parent, os.W_OK):  # SQLite needs the directory for its WAL/journal files
            raise StoreError(f"db directory {parent!r} is not writable (SQLite needs it for its WAL)")
        return
    if not os.path.isdir(parent):
        raise StoreError(f"db path {path!r}: directory {parent!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise StoreError(f"db path {path!r}: directory {parent!r} is not writable")


def _ro_uri(path: str) -> str:
    """A read-only URI that leaves no -wal/-shm files behind: ``immutable=1`` when no WAL file
    exists (nothing is being written), else ``mode=ro`` (the WAL's content must be seen)."""
    wal = path + "-wal"
    if os.path.exists(wal) and os.path.getsize(wal) > 0:
        return "file:" + os.path.abspath(path) + "?mode=ro"
    return "file:" + os.path.abspath(path) + "?mode=ro&immutable=1"


def _inspect(path: str, *, need_results: bool = False) -> None:
    """Check an existing, non-empty SQLite file is an attnio store of our schema (read-only);
    ``need_results``: it must hold the results table (a reader has nothing to read otherwise)."""
    uri = _ro_uri(path)
    deadline = time.monotonic() + OPEN_LOCK_TIMEOUT_S
    while True:
        try:
            con = sqlite3.connect(uri, uri=True, timeout=0.05)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open {path!r}: {e}") from None
        try:
            tables = {r[0] for r in con.execute(
                "SELECT name FROM sqlite_master WHERE type='table'")}
            meta = (dict(con.execute("SELECT key, value FROM attnio_meta").fetchall())
                    if "attnio_meta" in tables else {})
            break
        except sqlite3.Error as e:
            if _locked(e) and time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            if _locked(e):
                raise _db_error(path, e) from None
            raise StoreError(f"{path!r} is not a readable SQLite database ({e}); refusing to use "
                             "it") from None
        finally:
            con.close()
    if not tables:
        if need_results:
            raise StoreError(f"{path!r} is an empty SQLite database, not a results database: "
                             f"run `attnio sweep --db {path}` first")
        return  # an empty SQLite database: safe to initialise
    if "attnio_meta" not in tables:
        raise StoreError(
            f"{path!r} is an SQLite database but not an attnio results store "
            f"(tables: {', '.join(sorted(tables))}); refusing to use it"
        )
    if need_results and "results" not in tables:
        raise StoreError(f"{path!r} has no results table (a sweep was never run into it): run "
                         f"`attnio sweep --db {path}` first")
    version = meta.get("schema_version")
    if version != str(SCHEMA_VERSION) and version not in MIGRATES:
        raise StoreError(
            f"{path!r} has results schema version {version}, this attnio reads version "
            f"{SCHEMA_VERSION}; use another --db or export it with the attnio that wrote it"
        )


class ResultsStore:
    """An open results database.  ``readonly=True`` never creates or changes anything.

    ``lock_timeout`` (seconds): how long a call waits for a lock another process holds before
    it raises :class:`StoreError` (default :data:`LOCK_TIMEOUT_S` for a writer,
    :data:`OPEN_LOCK_TIMEOUT_S` for a reader; opening waits at most the latter).
    ``check``: when opening an existing database for writing, run SQLite's ``quick_check`` first
    (databases up to 1 GB), so that a damaged file is refused before a row is added to it.
    """

    def __init__(self, path: str | os.PathLike, *, readonly: bool = False,
                 lock_timeout: float | None = None, check: bool = True):
        path = os.fspath(path)
        if not path:
            raise ParameterError("db must be a file path, got ''")
        self.path = path
        self.readonly = readonly
        if lock_timeout is None:  # a reader (report, export) does not wait long
            lock_timeout = OPEN_LOCK_TIMEOUT_S if readonly else LOCK_TIMEOUT_S
        self.lock_timeout = float(lock_timeout)
        exists = os.path.exists(path)
        if exists and not (os.path.isfile(path) or os.path.isdir(path)):  # os.stat: no open
            # a named pipe would block the reader; SQLite would put a -journal beside a device
            raise StoreError(f"db path {path!r} is {kind_of(os.stat(path).st_mode)}, not a "
                             "results database file; refusing to use it")
        if exists:
            _check_file(path)
        elif readonly:
            raise StoreError(f"no results database at {path!r} (run `attnio sweep --db {path}` first)")
        if readonly and os.path.getsize(path) == 0:
            raise StoreError(f"{path!r} is empty (0 bytes), not a results database: run "
                             f"`attnio sweep --db {path}` first")
        if not readonly:
            _check_writable(path)
        if exists and os.path.getsize(path) > 0:
            _inspect(path, need_results=readonly)
        con: sqlite3.Connection | None = None
        try:
            if readonly:
                con = sqlite3.connect(_ro_uri(path), uri=True, timeout=0.05)
            else:
                # a sweep's writer commits from a background thread too (one at a time: its lock)
                con = sqlite3.connect(path, timeout=0.05, check_same_thread=False)
            self._con: sqlite3.Connection = con
            self._open(check and exists and not readonly and 0 < os.path.getsize(path) <= 2**30)
        except (StoreError, KeyboardInterrupt):
            if con is not None:
                con.close()
            raise
        except sqlite3.Error as e:  # it cannot even be opened
            if con is not None:
                con.close()
            raise _db_error(path, e) from None
        self._con.row_factory = sqlite3.Row

    def _open(self, quick_check: bool) -> None:
        """Set the database up (WAL, the schema) and make sure it can be written now: a lock
        held elsewhere is waited on for :data:`OPEN_LOCK_TIMEOUT_S` at most."""
        saved, self.lock_timeout = self.lock_timeout, min(self.lock_timeout, OPEN_LOCK_TIMEOUT_S)
        try:
            self._setup(quick_check)
        finally:
            self.lock_timeout = saved

    @_guarded
    def _setup(self, quick_check: bool) -> None:
        if self.readonly:
            self._con.execute("SELECT COUNT(*) FROM attnio_meta").fetchone()
            return
        if quick_check:
            res = self._con.execute("PRAGMA quick_check(1)").fetchone()[0]
            if res != "ok":
                raise sqlite3.DatabaseError(f"database disk image is malformed ({res})")
        self._con.execute("PRAGMA journal_mode=WAL")
        self._con.execute("PRAGMA synchronous=NORMAL")
        self._init_schema()
        self._migrate()
        self._con.execute("BEGIN IMMEDIATE")  # the write lock is free now (else: locked)
        self._con.execute("ROLLBACK")

    @staticmethod
    def check(path: str | os.PathLike) -> None:
        """Raise StoreError if ``path`` could not be opened for writing; creates nothing."""
        path = os.fspath(path)
        if not path:
            raise ParameterError("db must be a file path, got ''")
        if os.path.exists(path):
            _check_file(path)
        _check_writable(path)
        if os.path.exists(path) and os.path.getsize(path) > 0:
            _inspect(path)

    def _columns(self) -> list[str]:
        assert self._con is not None
        return [r[1] for r in self._con.execute("PRAGMA table_info(results)")]

    def _migrate(self) -> None:
        """An older store (:data:`MIGRATES`) gets the columns added since, in one transaction,
        and the current schema version; its rows read NULL there."""
        have = set(self._columns())
        assert self._con is not None
        version = self._con.execute(
            "SELECT value FROM attnio_meta WHERE key = 'schema_version'").fetchone()
        if set(COLUMN_NAMES) <= have and version and version[0] == str(SCHEMA_VERSION):
            return
        with self._con:
            for name, typ in COLUMNS:
                if name not in have:
                    self._con.execute(f"ALTER TABLE results ADD COLUMN {name} {typ}")
            self._con.execute("UPDATE attnio_meta SET value = ? WHERE key = 'schema_version'",
                              (str(SCHEMA_VERSION),))

    def _init_schema(self) -> None:
        from ..core.version import __version__

        cols = ",\n  ".join(
            f"{name} {typ}{' PRIMARY KEY' if name == 'config_hash' else ''}" for name, typ in COLUMNS
        )
        with self._con:
            self._con.execute(
                "CREATE TABLE IF NOT EXISTS attnio_meta (key TEXT PRIMARY KEY, value TEXT)"
            )
            self._con.execute(
                "INSERT OR IGNORE INTO attnio_meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
            self._con.execute("INSERT OR IGNORE INTO attnio_meta VALUES ('created_by', ?)",
                              (f"attnio {__version__}",))
            self._con.execute(f"CREATE TABLE IF NOT EXISTS results (\n  {cols}\n)")

    # ---------------------------------------------------------------- context
    def close(self) -> None:
        if self._con is not None:
            self._con.close()

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------------- writing
    def insert(self, rows: Iterable[dict]) -> int:
        """Write rows in one transaction.  A hash already stored as ok/skipped is kept (never
        duplicated); an ``error`` row is replaced by the new attempt.  Returns rows written."""
        rows = list(rows)
        if not rows:
            return 0
        for r in rows:
            unknown = set(r) - set(COLUMN_NAMES)
            if unknown:
                raise ParameterError(f"row has unknown column(s) {sorted(unknown)}")
            if not r.get("config_hash"):
                raise ParameterError("row needs a config_hash")
        return self.insert_values([row_values(r) for r in rows])

    @_guarded
    def insert_values(self, values: Sequence[tuple]) -> int:
        """:meth:`insert` for rows already as tuples of :data:`COLUMN_NAMES` values
        (:func:`row_values`): one transaction, all the rows or none."""
        if not values:
            return 0
        before = self._con.total_changes
        with self._con:  # one transaction: all the rows or none
            self._con.executemany(_INSERT_SQL, values)
        return self._con.total_changes - before

    # ---------------------------------------------------------------- reading
    @_guarded
    def done_hashes(self, verify: bool = False) -> set[str]:
        """Hashes that a rerun must not repeat (status ok or skipped); with ``verify``, ok rows
        count as done only when their verify columns were filled (or their absence explained)."""
        q = "SELECT config_hash FROM results WHERE status != 'error'"
        if verify:
            q += " AND NOT (" + _UNVERIFIED.format(t="results") + ")"
        return {r[0] for r in self._con.execute(q)}

    @_guarded
    def count(self, status: str | None = None) -> int:
        if status is None:
            return self._con.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        return self._con.execute("SELECT COUNT(*) FROM results WHERE status = ?", (status,)).fetchone()[0]

    @_guarded
    def rows(self, status: str | None = None, *, decode: bool = False) -> list[dict]:
        """All rows (optionally of one status), ordered by hash; ``decode`` parses the JSON
        columns and turns ``exact``/``causal`` into bools."""
        have = set(self._columns())  # an older store read as it is: its missing columns are None
        q = "SELECT " + ", ".join(c if c in have else f"NULL AS {c}" for c in COLUMN_NAMES) + \
            " FROM results"
        args: tuple = ()
        if status is not None:
            q += " WHERE status = ?"
            args = (status,)
        q += " ORDER BY config_hash"
        out = [dict(r) for r in self._con.execute(q, args)]
        return [decode_row(r) for r in out] if decode else out

    @_guarded
    def meta(self) -> dict[str, str]:
        return dict(self._con.execute("SELECT key, value FROM attnio_meta").fetchall())

    @_guarded
    def record_provenance(self, prov: dict[str, str] | None = None) -> None:
        """Record where this sweep runs (:func:`attnio.core.provenance.provenance`: attnio's
        version, the git commit, Python, platform, host, time) as ``last_sweep_*`` keys of the
        database's metadata, and as ``first_sweep_*`` the first time."""
        from ..core.provenance import provenance

        prov = provenance() if prov is None else prov
        with self._con:
            for k, v in prov.items():
                self._con.execute("INSERT OR IGNORE INTO attnio_meta VALUES (?, ?)",
                                  (f"first_sweep_{k}", v))
                self._con.execute("INSERT OR REPLACE INTO attnio_meta VALUES (?, ?)",
                                  (f"last_sweep_{k}", v))

    # ---------------------------------------------------------------- export
    def export(self, path: str | os.PathLike, fmt: str | None = None, *,
               where: str | None = None, latex: LatexOptions | None = None) -> int:
        """Write every row to ``path`` as csv, json, parquet or latex; returns the number of
        rows.  csv and parquet keep every store column (so :func:`read_export` gives the rows
        back) and add one column per tiling parameter (``tiling_Br`` ...) and per bound
        (``bound_pv_segment`` ...: its value); integer columns stay integer (parquet: nullable
        ``Int64``).  json holds the tiling, the bounds and the per-array counts as objects.
        latex writes a booktabs table of the rows that ran (one line per row, or a pivot, a
        caption, a longtable: :class:`LatexOptions`).  ``where``: only the rows that match
        (:func:`parse_where`, e.g. ``"d=64,causal=true,algorithm=flash1|flash2"``)."""
        path = os.fspath(path)
        fmt = _format(path, fmt)
        if latex is not None and fmt != "latex":
            raise ParameterError(f"caption, label, pivot and longtable are for a latex export, "
                                 f"not {fmt}", param="format")
        match = parse_where(where)
        rows = [r for r in self.rows() if match(r)]
        if fmt == "parquet":
            pd = _parquet_engine()
            wide, cols = _wide(rows)
            df = pd.DataFrame(wide, columns=cols)
            for c in cols:
                vals = [r.get(c) for r in wide if r.get(c) is not None]
                if _TYPES.get(c) == "INTEGER" or (c not in _TYPES and vals and all(
                        isinstance(v, int) and not isinstance(v, bool) for v in vals)):
                    df[c] = df[c].astype("Int64")
            _check_out(path)
            df.to_parquet(path, index=False)
            return len(rows)
        _check_out(path)
        if fmt == "csv":
            wide, cols = _wide(rows)
            with open(path, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(cols)
                for r in wide:
                    w.writerow(["" if r.get(c) is None else _csv_value(r[c]) for c in cols])
        elif fmt == "latex":
            with open(path, "w") as f:
                f.write(latex_table(rows, latex))
        else:
            with open(path, "w") as f:
                json.dump({"schema_version": SCHEMA_VERSION,
                           "rows": [_objects(r) for r in rows]}, f, indent=1)
                f.write("\n")
        return len(rows)


_INSERT_SQL = (
    f"INSERT INTO results ({', '.join(COLUMN_NAMES)}) VALUES ({', '.join('?' for _ in COLUMN_NAMES)}) "
    "ON CONFLICT(config_hash) DO UPDATE SET "
    + ", ".join(f"{c}=excluded.{c}" for c in COLUMN_NAMES if c != "config_hash")
    + " WHERE results.status = 'error' OR (" + _UNVERIFIED.format(t="results")
    + " AND excluded.status = 'ok' AND NOT " + _UNVERIFIED.format(t="excluded") + ")")


_PLAIN = (int, str, type(None))


def row_values(r: dict) -> tuple:
    """A row (a mapping of column names) as the tuple :meth:`ResultsStore.insert_values` takes:
    JSON columns encoded (strings pass as they are), booleans as 0/1, non-finite floats NULL."""
    get = r.get
    return tuple(v if type(v) in _PLAIN else _to_sql(v) for v in map(get, COLUMN_NAMES))


def _to_sql(v: Any) -> Any:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, sort_keys=True)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _csv_value(v: Any) -> str:
    return repr(v) if isinstance(v, float) else str(v)  # repr: floats round-trip exactly


def decode_row(r: dict) -> dict:
    r = dict(r)
    for c in ("tiling", "bounds", "per_array"):
        if r.get(c) is not None:
            r[c] = json.loads(r[c])
    for c in ("exact", "causal"):
        if r.get(c) is not None:
            r[c] = bool(r[c])
    return r


_FORMATS = ("csv", "json", "parquet", "latex")
_EXT = {"tex": "latex"}
_JSON_COLS = ("tiling", "bounds", "per_array")


def _objects(r: dict) -> dict:
    """A row with its JSON columns as objects (for a json export)."""
    return {c: (json.loads(v) if c in _JSON_COLS and isinstance(v, str) else v)
            for c, v in r.items()}


def _wide(rows: list[dict]) -> tuple[list[dict], list[str]]:
    """Rows with a column per tiling parameter and per bound (its value) added, and the columns
    in order: the store's, then ``tiling_*``, then ``bound_*`` (sorted)."""
    out, tcols, bcols = [], set(), set()
    for r in rows:
        w = dict(r)
        t = json.loads(r["tiling"]) if r.get("tiling") else {}
        for k, v in (t.items() if isinstance(t, dict) else ()):
            if isinstance(v, (int, float, str, bool)) or v is None:
                w[f"tiling_{k}"] = v
                tcols.add(f"tiling_{k}")
        b = json.loads(r["bounds"]) if r.get("bounds") else {}
        for k, v in (b.items() if isinstance(b, dict) else ()):
            if isinstance(v, dict):
                w[f"bound_{k}"] = v.get("value")
                bcols.add(f"bound_{k}")
        out.append(w)
    return out, [*COLUMN_NAMES, *sorted(tcols), *sorted(bcols)]


_LATEX_COLS = (("algorithm", "algorithm"), ("Nq", "$N_q$"), ("Nkv", "$N_{kv}$"), ("d", "$d$"),
               ("M", "$M$"), ("setting", "setting"), ("total", "total I/O"),
               ("bound_name", "best bound"), ("ratio", "ratio"))


def _tex(v: Any) -> str:
    if v is None:
        return "--"
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, int):
        return f"{v:,}".replace(",", "\\,")
    return (str(v).replace("\\", "\\textbackslash{}").replace("_", "\\_").replace("&", "\\&")
            .replace("%", "\\%").replace("#", "\\#"))


@dataclass(frozen=True)
class LatexOptions:
    """How a latex export looks: a ``caption`` and ``label`` (a ``table`` float around it, or a
    ``longtable`` that breaks across pages), and ``pivot = (row field, column field)``: one line
    per value of the row field, one column per value of the column field, each cell the
    ``value`` field of the row that has both (its total I/O by default), e.g. ``("N",
    "algorithm")``."""

    caption: str | None = None
    label: str | None = None
    longtable: bool = False
    pivot: tuple[str, str] | None = None
    value: str = "total"

    def __post_init__(self) -> None:
        for name in ("caption", "label"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, str) or len(v) > 2000 or "\n" in v):
                raise ParameterError(f"{name} must be one line of text (at most 2,000 "
                                     f"characters), got {str(v)[:40]!r}", param=name)
        if self.pivot is not None:
            if len(self.pivot) != 2 or self.pivot[0] == self.pivot[1]:
                raise ParameterError("pivot must be two different fields ROW,COLUMN, e.g. "
                                     f"N,algorithm, got {','.join(self.pivot)!r}", param="pivot")
            for f in (*self.pivot, self.value):
                if f not in _PIVOT_FIELDS:
                    raise ParameterError(f"pivot: unknown field {f!r}; a column of the "
                                         f"results, e.g. {_COMMON_FIELDS}", param="pivot")


#: fields a ``--where`` condition or a pivot may name: a row's columns, ``N`` (= Nq, the
#: sequence length of a square problem) and ``setting`` (mask, window, heads in words)
_PIVOT_FIELDS = frozenset(COLUMN_NAMES) | {"setting", "N"}
_COMMON_FIELDS = "algorithm, N, Nq, Nkv, d, M, causal, window, heads, kv_heads, setting, total, ratio"


def _coerce(text: str) -> Any:
    t = text.strip()
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(t)
        except ValueError:
            pass
    return t


def parse_where(where: str | None) -> Callable[[dict], bool]:
    """A row filter from ``"field=value,field=v1|v2,..."`` (every condition must hold; ``|``
    separates the values a field may take; true/false/none and numbers are typed), or every
    row for None.  A field that is not a column is a ParameterError naming it."""
    if where is None:
        return lambda r: True
    if not isinstance(where, str) or len(where) > 10_000:
        raise ParameterError("where must be conditions like d=64,causal=true (at most 10,000 "
                             "characters)", param="where")
    conds: list[tuple[str, list[Any]]] = []
    for part in filter(None, (p.strip() for p in where.split(","))):
        field, eq, values = part.partition("=")
        field = field.strip()
        if not eq or not field:
            raise ParameterError(f"where: {part!r} is not field=value (e.g. d=64)",
                                 param="where")
        if field not in _PIVOT_FIELDS:
            raise ParameterError(f"where: unknown field {field!r}; a column of the results, "
                                 f"e.g. {_COMMON_FIELDS}", param="where")
        conds.append((field, [_coerce(v) for v in values.split("|")]))
    if not conds:
        raise ParameterError("where: no condition given (e.g. d=64,causal=true)", param="where")

    def match(row: dict) -> bool:
        return all(_value(row, f) in vals for f, vals in conds)

    return match


def _setting(r: dict) -> str:
    heads = r.get("heads") or 1
    return ", ".join(p for p in (
        (r.get("causal_align") or "causal").replace("_", "-") if r.get("causal") else "",
        f"window {r['window']}" if r.get("window") is not None else "",
        f"{heads}/{r.get('kv_heads') or heads} heads" if heads > 1 else "") if p) or "--"


def _value(r: dict, field: str) -> Any:
    v = _setting(r) if field == "setting" else r.get("Nq" if field == "N" else field)
    return bool(v) if field == "causal" and v is not None else v


def latex_table(rows: Sequence[dict], options: LatexOptions | None = None) -> str:
    """A booktabs table (``\\usepackage{booktabs}``; ``longtable`` too for a long one) of the
    rows that ran: algorithm, sizes, setting (mask, window, heads), total I/O, the best explicit
    bound and the ratio; or a pivot of one field (:class:`LatexOptions`)."""
    o = options or LatexOptions()
    ok = sorted((r for r in rows if r.get("status") == "ok"),
                key=lambda r: (r["algorithm"], r["Nq"], r["Nkv"], r["d"], r["M"]))
    if o.pivot is None:
        head = [h for _, h in _LATEX_COLS]
        spec = "lrrrrlrlr"
        body = [" & ".join(_tex(dict(r, setting=_setting(r)).get(c)) if c != "setting"
                           else _setting(r) for c, _ in _LATEX_COLS) + " \\\\" for r in ok]
    else:
        rf, cf = o.pivot
        keys = sorted({_value(r, rf) for r in ok}, key=_sort_key)
        cols = sorted({_value(r, cf) for r in ok}, key=_sort_key)
        cell: dict[tuple[Any, Any], Any] = {}
        for r in ok:
            k = (_value(r, rf), _value(r, cf))
            if k in cell and cell[k] != r.get(o.value):
                raise ParameterError(
                    f"pivot: several rows have {rf}={k[0]}, {cf}={k[1]} with different "
                    f"{o.value}; narrow them with --where (e.g. fix d, M and the mask)",
                    param="pivot")
            cell[k] = r.get(o.value)
        head = [_tex(rf)] + [_tex(c) for c in cols]
        spec = "l" + "r" * len(cols)
        body = [" & ".join([_tex(k)] + [_tex(cell.get((k, c))) for c in cols]) + " \\\\"
                for k in keys]
    lines = ["% attnio sweep export --format latex (needs \\usepackage{booktabs}"
             + (", longtable" if o.longtable else "") + ")"]
    top = [" & ".join(head) + " \\\\"]
    if o.longtable:
        lines += [f"\\begin{{longtable}}{{{spec}}}"]
        if o.caption:
            lines += [f"\\caption{{{_tex(o.caption)}}}"
                      + (f"\\label{{{o.label}}}" if o.label else "") + " \\\\"]
        lines += ["\\toprule", *top, "\\midrule", "\\endfirsthead",
                  "\\toprule", *top, "\\midrule", "\\endhead",
                  "\\bottomrule", "\\endlastfoot", *body, "\\end{longtable}", ""]
        return "\n".join(lines)
    float_ = o.caption is not None or o.label is not None
    if float_:
        lines += ["\\begin{table}", "\\centering"]
        if o.caption:
            lines.append(f"\\caption{{{_tex(o.caption)}}}")
        if o.label:
            lines.append(f"\\label{{{o.label}}}")
    lines += [f"\\begin{{tabular}}{{{spec}}}", "\\toprule", *top, "\\midrule", *body,
              "\\bottomrule", "\\end{tabular}"]
    if float_:
        lines.append("\\end{table}")
    return "\n".join(lines + [""])


def _sort_key(v: Any) -> tuple[int, Any]:
    return (0, v) if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, str(v))


def export_target(fmt: str | None, out: str | None, *,
                  latex: bool = False) -> tuple[str | None, str]:
    """The format and the file of an export (``attnio sweep export``): with ``latex`` options
    (a caption, a pivot, ...) and no ``fmt``, latex when ``out`` is None or ends in ``.tex``;
    no ``out``: ``attnio-results.`` and the format's extension (csv by default).  A format left
    None is ``out``'s extension (:meth:`ResultsStore.export`)."""
    if latex and fmt is None:
        fmt = "latex" if out is None or out.lower().endswith(".tex") else None
    if out is None:
        fmt = fmt or "csv"
        out = f"attnio-results.{'tex' if fmt == 'latex' else fmt}"
    return fmt, out


def _format(path: str, fmt: str | None) -> str:
    if fmt is None:
        fmt = os.path.splitext(path)[1].lstrip(".").lower()
        fmt = _EXT.get(fmt, fmt)
    if fmt not in _FORMATS:
        raise ParameterError(f"format must be one of {', '.join(_FORMATS)}, got {fmt!r}")
    return fmt


def _check_out(path: str) -> None:
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        raise ParameterError(f"out: cannot write {path!r} (directory missing or not writable)")


def _parquet_engine():
    pd = require("pandas", "parquet", "parquet export (or --format csv/json)")
    if not available("fastparquet"):  # pandas' other engine, if someone has it
        require("pyarrow", "parquet", "parquet export (or --format csv/json)")
    return pd


def read_export(path: str | os.PathLike, fmt: str | None = None) -> list[dict]:
    """Read rows back from an export, with the store's types (ints, floats, None), ordered by
    hash: ``read_export(p) == store.rows()`` for a faithful export."""
    path = os.fspath(path)
    fmt = _format(path, fmt)
    if fmt == "latex":
        raise ParameterError("format: a latex export is a table for a paper and cannot be read "
                             "back; export csv, json or parquet", param="format")
    if fmt == "parquet":
        pd = _parquet_engine()
        df = pd.read_parquet(path)
        raw = df.astype(object).where(df.notna(), None).to_dict("records")
        rows = [{c: _typed(c, r.get(c)) for c in COLUMN_NAMES} for r in raw]
    elif fmt == "csv":
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            rows = [{c: _typed(c, None if r.get(c, "") in ("", None) else r[c])
                     for c in COLUMN_NAMES} for r in reader]
    else:
        with open(path) as f:
            obj = json.load(f)
        if not isinstance(obj, dict) or str(obj.get("schema_version")) not in (
                str(SCHEMA_VERSION), *MIGRATES):
            raise StoreError(f"{path!r} is not an attnio export of schema version {SCHEMA_VERSION}")
        rows = [{c: _typed(c, _json_text(r.get(c)) if c in _JSON_COLS else r.get(c))
                 for c in COLUMN_NAMES} for r in obj["rows"]]
    return sorted(rows, key=lambda r: r["config_hash"])


def _json_text(v: Any) -> Any:
    return json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v


def _typed(col: str, v: Any) -> Any:
    if v is None:
        return None
    t = _TYPES[col]
    if t == "INTEGER":
        return int(v)
    if t == "REAL":
        return float(v)
    return str(v)


def summarize(rows: Sequence[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        out[r["status"]] = out.get(r["status"], 0) + 1
    return out
