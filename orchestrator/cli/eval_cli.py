"""``mesh eval``: evaluation suites from a repository's history (``orchestrator.evals``)."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import click

from tracker.cli_io import echo as _say

__all__ = ["eval_group"]


@click.group("eval")
def eval_group() -> None:
    """Measure on your repository's history whether a team beats one agent."""


def _eval_folder_options(f):
    """FOLDER, --suite, --repo and --eval: which eval a command reads (``_eval_folder``, ``_synced``)."""
    f = click.option("--eval", "eval_name", metavar="NAME",
                     help="A shared eval's name in its database (mesh --db postgresql://...), copied into FOLDER"
                          " (default: the eval FOLDER holds, or ev-<FOLDER's name>).")(f)
    f = click.option("--repo", type=click.Path(file_okay=False),
                     help="The repository (default: the current folder's).")(f)
    f = click.option("--suite", type=click.Path(dir_okay=False), help="The suite whose default folder to read.")(f)
    return click.argument("folder", required=False, type=click.Path(file_okay=False))(f)


@eval_group.command("suite")
@click.option("--from-git", "from_git", is_flag=True,
              help="Build the suite from the first-parent history of the repository.")
@click.option("--from-swebench", "from_swebench", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="Build the suite from SWE-bench instances of this repository (JSON or JSONL), each checked:"
                   " its FAIL_TO_PASS tests fail on its base and pass with its gold patch.")
@click.option("--repo", type=click.Path(file_okay=False), help="The repository (default: the current folder's).")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False), help="mesh.toml to use.")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False), default="mesh-eval-suite.jsonl",
              show_default=True, help="Where to write the suite (JSONL, one case a line).")
@click.option("--command", "command",
              help="The hidden tests' command; {tests} stands for the case's test files"
                   " (default: the project's Python, Node, Go or Rust test runner on them).")
@click.option("--max-files", type=click.IntRange(1), default=20, show_default=True, help="Largest commit, in files.")
@click.option("--max-lines", type=click.IntRange(1), default=400, show_default=True,
              help="Largest commit, in lines added and removed.")
@click.option("--limit", type=click.IntRange(1),
              help="Keep this many cases: the newest that pass their checks (history is walked newest first).")
@click.option("--since", metavar="REV", help="Only commits after REV (a tag, a branch, a commit).")
@click.option("--until", metavar="REV", default="HEAD", show_default=True, help="The newest commit to look at.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), metavar="SECONDS",
              help="Time limit of each hidden test run (default: validation.timeout_s).")
@click.option("--merges", is_flag=True,
              help="A merge of the first-parent history is a case too: its diff against its first parent"
                   " (repositories that merge pull requests).")
@click.option("--task-text", "task_text", type=click.Choice(["message", "subject", "issue"]), default="message",
              show_default=True,
              help="A case's task: the commit message without trailers (or the tracker issue it names), its"
                   " subject line alone, or the tracker issue it names (a commit naming none is dropped).")
@click.option("--runs", type=click.IntRange(1), default=3, show_default=True,
              help="Runs of each case's base and reference: a test whose outcome varies between them is flaky,"
                   " left out of the case's FAIL_TO_PASS and PASS_TO_PASS tests and named.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the kept and dropped cases as one JSON object (progress stays on stderr).")
@click.pass_context
def suite_command(ctx: click.Context, from_git: bool, from_swebench, repo, config_file, out, command, max_files,
                  max_lines, limit, since, until, timeout_s, merges: bool, task_text: str, runs: int,
                  as_json: bool) -> None:
    """Build an evaluation suite: commits that change source and tests become cases (--from-git),
    or SWE-bench instances of the repository do (--from-swebench), kept only when their tests fail
    on the base and pass with the commit (the gold patch), in the validation sandbox."""
    from orchestrator.cli.common import _fail
    from orchestrator.evals.builder import SuiteError, build_suite
    from orchestrator.evals.swebench import import_swebench

    root = ctx.find_root().obj or {}
    if from_git == bool(from_swebench):
        _fail(ctx, "name where the cases come from: --from-git or --from-swebench FILE (one of them)", 2, as_json)
        return
    history_only = [f"--{name.replace('_', '-')}" for name in ("max_files", "max_lines", "since", "until", "merges",
                                                                "task_text")
                    if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE]
    if from_swebench and history_only:
        _fail(ctx, f"{', '.join(history_only)}: for --from-git only (an instance names its base commit)", 2, as_json)
        return
    where = Path(repo) if repo else Path.cwd()
    config = Path(config_file) if config_file else None
    try:
        if from_swebench:
            built = import_swebench(where, config, instances=Path(from_swebench), out=Path(out), command=command,
                                    limit=limit, timeout_s=timeout_s, runs=runs,
                                    progress=lambda line: _say(line, err=True))
        else:
            built = build_suite(where, config, out=Path(out), command=command, max_files=max_files,
                                max_lines=max_lines, limit=limit, db=root.get("db"), since=since, until=until,
                                timeout_s=timeout_s, progress=lambda line: _say(line, err=True), merges=merges,
                                task_text=task_text, runs=runs)
    except SuiteError as exc:
        _fail(ctx, str(exc), 2, as_json)
        return
    if as_json:
        click.echo(json.dumps(built.to_dict(), indent=2))
        return
    for line in built.lines():
        _say(line)


@eval_group.command("run")
@click.argument("suite", type=click.Path(exists=True, dir_okay=False))
@click.option("--arm", "arms", multiple=True, metavar="NAME[: key=value ...]",
              help="An arm to run every case with: a name of [eval.arms] in mesh.toml, or NAME: and its settings"
                   " (profile=single worker-cmd='...' model=M models.ROLE=M backend=B worker=W match=ARM"
                   " match-by=tokens|usd). Repeat; the first is the reference unless --reference says.")
@click.option("--profile", "profiles", multiple=True, type=click.Choice(["full", "lite", "single", "candidates"]),
              help="Shorthand for an arm of that name running that profile with --backend/--worker/--worker-cmd.")
@click.option("--reference", metavar="ARM", help="The arm every other is compared with (default: the first).")
@click.option("--trials", type=click.IntRange(1, 20), default=1, show_default=True,
              help="Runs of each (case, arm): the report gives pass@1, pass@k and pass^k.")
@click.option("--jobs", type=click.IntRange(1, 32), default=1, show_default=True, help="Runs at the same time.")
@click.option("--out", type=click.Path(file_okay=False),
              help="The eval's folder (default: <repo>/.mesh/evals/<suite name>/); run again to continue it.")
@click.option("--repo", type=click.Path(file_okay=False), help="The repository (default: the current folder's).")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False), help="mesh.toml to use.")
@click.option("--remote", metavar="URL",
              help="The git remote the cases' repositories are built from (every machine of a shared eval"
                   " fetches the bases there; default: the checkout itself, or, with --db postgresql://...,"
                   " its origin).")
@click.option("--max-usd", type=click.FloatRange(min=0), help="Stop starting runs once the eval spent this much.")
@click.option("--batch", is_flag=True, help="The anthropic backend's calls as Message Batches (half price, slower).")
@click.option("--retry-errors", is_flag=True, help="Run again the pairs whose run ended in an error.")
@click.option("--eval", "eval_name", metavar="NAME",
              help="The eval's name in its database (default: ev-<its folder's name>): with mesh --db"
                   " postgresql://..., runners naming one NAME work one eval whatever their folders, and evals of"
                   " other names share the database without meeting.")
@click.option("--redo", "redo", multiple=True, metavar="CASE[:ARM[.tK]]",
              help="Run this pair anew, its result and repository removed (repeat; CASE: every arm and trial).")
@click.option("--backend", type=click.Choice(["replay", "command", "anthropic", "llm"]),
              help="Worker backend of the arms that name no worker.")
@click.option("--worker", type=click.Choice(["claude-code", "codex", "opencode"]),
              help="An agent CLI preset for the arms that name no worker.")
@click.option("--worker-cmd", "worker_cmd", help="An agent CLI reading the prompt on stdin, for the arms that name"
                                                 " no worker.")
@click.option("--yes", is_flag=True, help="Start without asking, after printing the estimate.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object (progress stays on"
                                                      " stderr).")
@click.pass_context
def run_command(ctx: click.Context, suite, arms, profiles, reference, trials, jobs, out, repo, config_file, remote,
                max_usd, batch, retry_errors, eval_name, redo, backend, worker, worker_cmd, yes: bool,
                as_json: bool) -> None:
    """Run every case of SUITE with each arm (a profile with its workers) as real mesh runs, each in
    a repository of its own holding only the case's base; grade each with its hidden tests.
    Exit 1 while a run is in error (a missing CLI, the API's rate limit, ...: --retry-errors).

    With ``mesh --db postgresql://...`` the eval is shared: run it on several machines (or several
    times on one) and each run claims the pairs left, continues those of a runner that died, and
    ends when every pair has its result."""
    from orchestrator.cli.common import _fail
    from orchestrator.evals.runs import EvalError, EvalOptions, EvalRun
    from tracker.errors import TrackerError

    root = ctx.find_root().obj or {}
    options = EvalOptions(suite=Path(suite), profiles=list(profiles), arms=list(arms), reference=reference,
                          trials=trials, repo=Path(repo) if repo else None,
                          config_file=Path(config_file) if config_file else None, out=Path(out) if out else None,
                          db=root.get("db"), remote=remote, jobs=jobs, max_usd=max_usd, batch=batch,
                          retry_errors=retry_errors, redo=list(redo), eval_name=eval_name, run_args={"backend": backend, "worker": worker, "worker_cmd": worker_cmd})
    try:
        with _interruptible():
            evaluation = EvalRun(options, echo=lambda line: _say(line, err=True))
            estimate = evaluation.estimate()
            _say(f"{estimate['runs']} run(s) to make ({estimate['done']} done) in {evaluation.folder};"
                 f" estimated cost ${estimate['estimated_usd']:.2f} ("
                 + ", ".join(f"{a} ${v:.4f}/run, {estimate['basis'][a]}" for a, v in estimate["per_run_usd"].items())
                 + ")" + (f"; budget ${max_usd:.2f}" if max_usd is not None else ""), err=True)
            if evaluation.board.shared:
                _say(f"shared eval {evaluation.meta['eval']} in {evaluation.meta['db']}: every runner claims the runs"
                     f" left; cases built from {evaluation.meta['remote']}", err=True)
            if estimate["runs"] and not yes and not as_json and sys.stdin.isatty():
                click.confirm("Start?", default=True, abort=True, err=True)
            summary = evaluation.run()
    except EvalError as exc:
        _fail(ctx, str(exc), 2, as_json)
        return
    except TrackerError as exc:  # the eval's database went away (a shared eval's server, say)
        from redact import scrub

        _fail(ctx, f"the eval's tracker: {scrub(str(exc))[:400]}; mesh eval run continues where it stopped", 4,
              as_json)
        return
    except KeyboardInterrupt:
        _say("stopped: mesh eval run continues where it stopped", err=True)
        ctx.exit(130)
        return
    if as_json:
        click.echo(json.dumps({**summary, "estimate": estimate}, indent=2))
    else:
        _say(f"{summary['ran']} run(s) graded, {summary['resolved']} resolved, {summary['errors_now']} in error,"
             f" {summary['skipped']} not started (budget); the report: mesh eval report {evaluation.folder}")
    if summary["errors"]:
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(summary["error_kinds"].items()))
        _say(f"{summary['errors']} run(s) in error ({kinds}): not counted as finished; fix the cause, then"
             " mesh eval run --retry-errors", err=True)
        ctx.exit(1)


@contextlib.contextmanager
def _interruptible():
    """Ctrl-C semantics whatever the eval was started from: SIGINT and SIGTERM both stop it as
    Ctrl-C does (no new run starts, the runs under way stop after their next checkpoint, exit 130),
    even when a script started it with SIGINT ignored (a shell's ``&`` does that), which would
    leave Python without its KeyboardInterrupt."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    before = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


@eval_group.command("report")
@_eval_folder_options
@click.option("--html", "html_path", type=click.Path(dir_okay=False),
              help="Also write the report page there (default: FOLDER/report.html; with --reference ARM,"
                   " FOLDER/report-vs-ARM.html, the eval's own page left as it is).")
@click.option("--reference", metavar="ARM", help="Compare every arm with this one (default: the eval's reference).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click.pass_context
def report_command(ctx: click.Context, folder, suite, repo, eval_name, html_path, reference, as_json: bool) -> None:
    """Per arm: resolved rate with its 95% interval, runs in error apart with their reasons, the
    paired test against the reference arm, pass@k and pass^k with trials, tokens, cost per run and
    per resolved run, wall time, calls and review cycles; and the report page (HTML, offline)."""
    from orchestrator.cli.common import _fail
    from orchestrator.evals.page import render_eval_page
    from orchestrator.evals.report import ReportError, lines, report_data
    from orchestrator.evals.cases import write_text

    folder = _eval_folder(ctx, folder, suite, repo, as_json)
    if folder is None or _synced(ctx, folder, as_json, eval_name) is False:
        return
    try:
        report = report_data(Path(folder), reference)
    except ReportError as exc:
        _fail(ctx, str(exc), 2, as_json)
        return
    # A page against another reference is a page of its own: the eval's page stays the eval's.
    page = Path(html_path) if html_path else Path(folder) / (f"report-vs-{reference}.html" if reference
                                                             else "report.html")
    write_text(page, render_eval_page(report))
    if as_json:
        click.echo(json.dumps({**report, "page": str(page)}, indent=2))
        return
    for line in lines(report):
        _say(line)
    _say(f"the page: {page}")


def _eval_folder(ctx: click.Context, folder, suite, repo, as_json: bool) -> Path | None:
    """The eval folder a command reads: FOLDER, else the default folder of --suite, else the
    repository's newest eval; None (after saying why, exit 2) when there is none."""
    from orchestrator.cli.common import _fail
    from orchestrator.evals.runs import eval_folder

    if folder is not None:
        return Path(folder)
    from orchestrator.worktree.gitops import GitError, repo_root

    try:
        base = repo_root(Path(repo or Path.cwd()).resolve())
    except GitError as exc:
        _fail(ctx, str(exc), 2, as_json)
        return None
    found = [eval_folder(base, Path(suite))] if suite else sorted(
        (base / ".mesh" / "evals").glob("*/eval.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        _fail(ctx, f"no eval in {base / '.mesh' / 'evals'}; name its folder", 2, as_json)
        return None
    return found[-1].parent if not suite else found[0]


def _synced(ctx: click.Context, folder: Path, as_json: bool, name: str | None = None):
    """A shared eval's folder brought up to its database's rows (``mesh --db postgresql://...``, or
    the database the folder's eval recorded; a password comes from the environment or .pgpass):
    what runs now, or None for an eval of this machine alone; False after failing (exit 2). A
    database out of reach leaves the folder as it was, said on stderr."""
    from orchestrator.cli.common import _fail
    from orchestrator.evals.shared import is_shared, meta_url, recorded_db, sync_folder
    from redact import scrub

    given = (ctx.find_root().obj or {}).get("db")
    db = given if is_shared(given) else recorded_db(Path(folder))
    if db is None:
        if name is not None:
            _fail(ctx, f"--eval {name}: a shared eval is read from its database: mesh --db postgresql://... eval", 2,
                  as_json)
            return False
        return None
    try:
        return sync_folder(Path(folder), db, eval_id=name)
    except (LookupError, ValueError) as exc:
        _fail(ctx, str(exc), 2, as_json)
        return False
    except Exception as exc:  # the server is out of reach: this machine's copy, said
        _say(f"warning: {meta_url(db)}: {scrub(str(exc))[:300]}; showing this machine's copy of the eval", err=True)
        return None


@eval_group.command("status")
@_eval_folder_options
@click.option("--json", "as_json", is_flag=True, help="Print the status as one JSON object.")
@click.pass_context
def status_command(ctx: click.Context, folder, suite, repo, eval_name, as_json: bool) -> None:
    """Where an eval stands, while it runs or after: runs done, running, in error and left per arm,
    the spend so far, and the time and cost its last progress estimated to be left."""
    from orchestrator.cli.common import _fail
    from orchestrator.evals.progress import status_data, status_lines
    from orchestrator.evals.report import ReportError

    folder = _eval_folder(ctx, folder, suite, repo, as_json)
    if folder is None or (shared := _synced(ctx, folder, as_json, eval_name)) is False:
        return
    try:
        data = status_data(Path(folder), running=shared["running"] if shared else None)
    except ReportError as exc:
        _fail(ctx, str(exc), 2, as_json)
        return
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    for line in status_lines(data):
        _say(line)


@eval_group.command("export")
@_eval_folder_options
@click.option("--arm", "arms", multiple=True, metavar="ARM", help="Export this arm only (repeat; default: every arm).")
@click.option("-o", "--out", "out", type=click.Path(file_okay=False), help="Where to write (default: FOLDER/export).")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as one JSON object.")
@click.pass_context
def export_command(ctx: click.Context, folder, suite, repo, eval_name, arms, out, as_json: bool) -> None:
    """SWE-bench predictions per arm and trial (instance_id, model_name_or_path, model_patch: each
    run's final diff against its base) and results.jsonl (a line per case, arm and trial: state,
    error, resolved, tests, cost, tokens), for another harness to grade mesh's patches again."""
    from orchestrator.cli.common import _fail
    from orchestrator.evals.export import export_eval
    from orchestrator.evals.report import ReportError

    folder = _eval_folder(ctx, folder, suite, repo, as_json)
    if folder is None or _synced(ctx, folder, as_json, eval_name) is False:
        return
    try:
        exported = export_eval(Path(folder), arms=list(arms), out=Path(out) if out else None)
    except ReportError as exc:
        _fail(ctx, str(exc), 2, as_json)
        return
    if as_json:
        click.echo(json.dumps(exported.to_dict(), indent=2))
        return
    for line in exported.lines():
        _say(line)
