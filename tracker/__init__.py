"""mesh's tracker: a beads-compatible issue tracker, as a library with a thin command line.

The bottom layer of mesh: everything above may import it. May import: no other package of
mesh. Besides the standard library it uses click (the command line and the ``bd`` shim only)
and psycopg with psycopg_pool (``postgres`` and ``migrate`` only, inside the functions that
talk to a server); nothing of orchestrator, roles or redact.

Its modules, by group:

- storage engines: ``db`` (the SQLite engine, the transactions both engines share, and the
  ready-work state every write refreshes), ``postgres`` (the PostgreSQL engine),
  ``connect`` (opening either engine, schema brought up to date), ``tallies`` (the figures of
  ``bd stats`` kept by SQLite's writes), ``dialect`` (what
  differs between the engines' SQL), ``schema`` (the tables and their versions), and
  ``migrate`` (moving a workspace from one database to the other);
- the Tracker API: ``reader`` (``Reader``: opening a tracker and every read; where a workspace
  is), ``store`` (``Tracker``, a ``Reader`` with the writes of ``issues``, ``ready``,
  ``dependencies``, ``comments`` and ``coordination``), ``rows``
  (how rows become issue, dependency and comment objects), ``model`` (field names, allowed
  values, time), ``ids``, ``errors``, ``jsonl`` (beads JSONL import and export) and
  ``safe_text`` (untrusted text made safe to print), ``jsontext`` (JSON without importing the
  ``json`` package on the hot reads);
- bd compatibility: ``bd_reads`` (bd's JSON shapes and read commands), ``bd_compat`` (those
  and bd's report commands), ``bd_views``
  (short ids, sorting, search, counts, trees), ``bd_shim`` (the ``bd`` entry point) and ``bd_hot``
  (``ready``/``list``/``show --json`` answered without click, for the processes agents start)
  with ``hot_output`` (how those answers, and ``mesh --help``'s generated text, are printed);
- the ``mesh tracker`` / ``bd`` command line, by command family: ``cli`` (the group and
  the issue commands), ``cli_deps`` (``dep``), ``cli_labels`` (``label``), ``cli_search``
  (``search``, ``count``, ``stale``, ``children``, ``duplicates``), ``cli_admin``
  (``doctor``, ``repair-deps``, ``info``, ``migrate``), with ``cli_flags`` (bd's global
  flags) and ``cli_io`` (what every command shares: ``--json``, errors, printing).

``from tracker import Tracker`` and ``from tracker.store import Tracker`` are the public
paths to the library.
"""

__all__ = ["Tracker"]


def __getattr__(name: str):
    # Loaded on first use: ``mesh --help`` and the command modules import ``tracker.cli_io`` or
    # ``tracker.safe_text`` and must not pay for the whole library at every start.
    if name == "Tracker":
        from .store import Tracker

        return Tracker
    raise AttributeError(f"module 'tracker' has no attribute {name!r}")
