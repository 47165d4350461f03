"""The MCP tools and resources of ``mesh mcp``: typed inputs, structured results.

Each tool is an async function registered on the server in ``register``: its parameters
(with their descriptions and bounds) are its input schema, its pydantic return type its
output schema. The work runs in a worker thread (the tracker and git block), so one slow
call never holds up another session on the HTTP transport. A bad argument comes back as a
tool error naming the field and the fix (``InputProblem``), never as a traceback; nothing is
created or started when an argument is wrong.

Adding a tool is one more decorated function in ``register`` calling the service.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

import anyio
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from orchestrator.mcp_server.jobs import Job, JobNotFound
from orchestrator.mcp_server.service import InputProblem, MeshService, ServiceError

__all__ = ["register", "POLL_S"]

POLL_S = 0.5  # how often ``status`` with wait=true looks again
T = TypeVar("T")

Label = Annotated[str | None, Field(description="The scope as a plan label, e.g. plan:q3 (or give parent).")]
Parent = Annotated[str | None, Field(description="The scope as an epic id (instead of label).")]
TaskId = Annotated[str, Field(description="A task id, e.g. acme-4f2.", min_length=1)]
JobId = Annotated[str, Field(description="The job id start_run or start_drain returned, e.g. drain-1a2b3c4d.",
                             min_length=1)]
Reviewer = Annotated[Literal["worker", "human"] | None,
                     Field(description="Who reviews: a reviewer worker, or a person (the run waits for"
                                       " submit_review or `mesh review`). Default: the project's mesh.toml.")]
Worker = Annotated[Literal["claude-code", "codex", "opencode"] | None,
                   Field(description="An agent CLI preset for every role (default: the project's mesh.toml).")]
READ_ONLY = ToolAnnotations(readOnlyHint=True, openWorldHint=False)


class ScopeView(BaseModel):
    """A scope's tasks by state, and its tree of epics as ``mesh status`` shows it."""

    scope: dict[str, Any]
    branch: str = Field(description="The scope's integration branch, where approved work lands.")
    branch_tip: str | None
    ready: list[dict[str, Any]]
    running: list[dict[str, Any]]
    waiting: list[dict[str, Any]] = Field(description="Open tasks whose blockers are not closed yet.")
    blocked: list[dict[str, Any]] = Field(description="Tasks a run blocked, with the reason code.")
    closed: list[dict[str, Any]]
    epics: list[dict[str, Any]]


class TaskCreated(BaseModel):
    id: str
    title: str
    status: str
    labels: list[str]
    parent: str | None
    dependencies: list[str]


class JobStarted(BaseModel):
    """A run or drain started in a process of its own: it goes on when this session ends."""

    job: str
    kind: Literal["run", "drain"]
    pid: int
    command: list[str]
    started: str
    scope: dict[str, str | None]
    task: str | None
    log: str = Field(description="Its progress log.")
    next: str


class JobStatus(BaseModel):
    """Where a job is. ``state``: running, stopping, finished, stopped, failed or died."""

    job: str
    kind: Literal["run", "drain"]
    state: str
    alive: bool
    scope: dict[str, Any]
    task: str | None
    command: list[str]
    started: str
    elapsed_s: float
    pid: int
    run_id: str | None = None
    round: str | None = Field(description="The kind of the run's latest checkpoint (proposal, vote, review...).")
    step: str | None = Field(default=None, description="What the run does now: proposal, validation, review,"
                             " waiting for a person, landing, closing, done (a drain: each task's, in tasks).")
    cycle: str | None = Field(description="c<consensus cycle>/r<review cycle>.")
    checkpoints: int
    last_line: str | None
    tasks: list[dict[str, Any]] = Field(default_factory=list, description="A drain's tasks, each with its state.")
    calls: int | None = None
    tokens: int | None
    cost_usd: float | None
    outcome: dict[str, Any] | None = Field(description="When it ended: outcome and reason code (a profile block"
                                                        " reason, or the drain's stop reason).")
    exit_code: int | None
    stop_requested: str | None
    log_tail: list[str]


class LineComment(BaseModel):
    """A person's comment on a line of the diff under review: it becomes one finding."""

    path: str = Field(description="A file of the diff, as the diff names it.", min_length=1)
    line: int = Field(description="A line number of the file after the change that the diff shows.", ge=1)
    end: int | None = Field(default=None, description="The last line, for a comment on several lines.", ge=1)
    text: str = Field(description="What is wrong and why.", min_length=1)
    severity: Literal["Critical", "High", "Medium", "Low"] = "Medium"
    label: Literal["MUST_FIX", "SHOULD_CONSIDER", "CAN_IGNORE"] | None = Field(
        default=None, description="Default by severity: Critical and High MUST_FIX, Medium SHOULD_CONSIDER,"
                                  " Low CAN_IGNORE.")
    fix: str | None = Field(default=None, description="The smallest change that would settle it.")


class WaitingReview(BaseModel):
    """A run waiting for a person's review: what to review."""

    task: str
    title: str
    run_id: str
    cycle: int
    commit: str | None
    branch: str | None
    requested_at: str | None
    validation: list[dict[str, Any]]
    diff: str


class ReviewRecorded(BaseModel):
    """The review as the waiting run takes it: the same artifact a reviewer worker's answer makes."""

    task: str
    decision: Literal["approve", "request_changes"]
    findings: list[dict[str, Any]]
    summary: str


class StopResult(BaseModel):
    job: str
    stopping: bool
    note: str


class Transcript(BaseModel):
    """A task's runs as ``mesh show`` gives them."""

    task: dict[str, Any]
    runs: list[dict[str, Any]]
    untrusted: int = Field(0, description="Checkpoints unsigned or wrongly signed while MESH_SIGNING_KEY is set"
                                          " (each step's trust says which).")
    text: str


class ReportWritten(BaseModel):
    task: str
    path: str = Field(description="The self-contained HTML page (no script, nothing fetched).")


class UsageSummary(BaseModel):
    """``mesh usage``: tokens, cache use and dollars, in total and by task, role, model and day."""

    prices_as_of: str
    filters: dict[str, Any]
    total: dict[str, Any]
    by_task: list[dict[str, Any]]
    by_role: list[dict[str, Any]]
    by_model: list[dict[str, Any]]
    by_day: list[dict[str, Any]]
    unpriced_models: list[str]


async def _call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn`` in a worker thread; the service's typed problems become tool errors (one line)."""
    try:
        return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))
    except (InputProblem, ServiceError, JobNotFound) as exc:
        raise ToolError(str(exc)) from None


def _started(job: Job) -> JobStarted:
    return JobStarted(job=job.id, kind=job.kind, pid=job.pid, command=job.command, started=job.started,
                      scope=job.scope, task=job.task, log=job.log,
                      next=f"follow it with status(job={job.id!r}, wait=true); stop it with stop(job={job.id!r})")


def register(server: FastMCP, service: MeshService) -> None:
    """Register every tool and resource of ``service`` on ``server``."""

    @server.tool(annotations=READ_ONLY)
    async def scope(label: Label = None, parent: Parent = None) -> ScopeView:
        """A scope's tasks: ready, running, waiting on blockers, blocked (with the reason) and closed,
        and its integration branch, like `mesh status`."""
        return ScopeView(**await _call(service.scope, label, parent))

    @server.tool()
    async def create_task(
            title: Annotated[str, Field(description="One line.", min_length=1, max_length=500)],
            description: Annotated[str, Field(description="What to do and why.")] = "",
            acceptance: Annotated[str, Field(description="Acceptance criteria: how the result is judged.")] = "",
            labels: Annotated[list[str], Field(description="Labels; a plan label (plan:NAME) makes the scope.")] = [],
            parent: Annotated[str | None, Field(description="The epic it belongs to.")] = None,
            dependencies: Annotated[list[str], Field(description="Ids of tasks that must close first.")] = [],
            priority: Annotated[int, Field(description="0 (highest) to 4.", ge=0, le=4)] = 2) -> TaskCreated:
        """Create a task in the tracker (nothing is created when a field is wrong)."""
        return TaskCreated(**await _call(service.create_task, title=title, description=description,
                                         acceptance=acceptance, labels=list(labels), parent=parent,
                                         dependencies=list(dependencies), priority=priority))

    @server.tool()
    async def start_run(task: TaskId, worker: Worker = None, reviewer: Reviewer = None) -> JobStarted:
        """Start a mesh run on one task in the background: plan, critique, synthesis, vote, patch,
        validation, review, close. Returns a job id at once; the run outlives this session."""
        return _started(await _call(service.start_run, task, worker, reviewer))

    @server.tool()
    async def start_drain(
            label: Label = None, parent: Parent = None,
            jobs: Annotated[int | None, Field(description="Tasks in flight at once (default: config).",
                                              ge=1, le=64)] = None,
            max_tasks: Annotated[int | None, Field(description="Start at most this many tasks.", ge=1)] = None,
            budget_usd: Annotated[float | None, Field(description="Start no task the remaining budget (USD)"
                                                                  " cannot cover.", ge=0)] = None,
            worker: Worker = None, reviewer: Reviewer = None) -> JobStarted:
        """Start a mesh drain in the background: every ready task of the scope, in parallel, each
        landing on the scope's integration branch. Returns a job id at once; it outlives this session."""
        return _started(await _call(service.start_drain, label=label, parent=parent, jobs=jobs, max_tasks=max_tasks,
                                    budget_usd=budget_usd, worker=worker, reviewer=reviewer))

    @server.tool(annotations=READ_ONLY)
    async def review_requests(task: Annotated[str | None, Field(description="Only this task's wait.")] = None
                              ) -> list[WaitingReview]:
        """The runs waiting for a person's review, each with what to review: the branch's diff (comment
        on the lines it shows of the files after the change) and the validation."""
        return [WaitingReview(**w) for w in await _call(service.waiting_reviews, task)]

    @server.tool()
    async def submit_review(
            task: TaskId,
            decision: Annotated[Literal["approve", "request_changes"], Field(description="The review's decision.")],
            summary: Annotated[str, Field(description="1 to 5 lines: the review in short.", min_length=1)],
            comments: Annotated[list[LineComment], Field(description="Comments on lines of the diff; each becomes"
                                                                     " a finding (request_changes needs one).")] = [],
            reviewer: Annotated[str | None, Field(description="Who reviews (default: the tracker actor).")] = None
            ) -> ReviewRecorded:
        """Review a run that waits for a person (reviewer human): the same [orch:review], findings as
        sub-issues and revision cycle as a reviewer worker's answer. Nothing is written when refused."""
        return ReviewRecorded(**await _call(service.submit_review, task, decision=decision, summary=summary,
                                            comments=[c.model_dump() for c in comments], reviewer=reviewer or ""))

    @server.tool(annotations=READ_ONLY)
    async def status(job: JobId, ctx: Context,
                     wait: Annotated[bool, Field(description="Wait until the job ends (or timeout_s), sending"
                                                             " progress notifications.")] = False,
                     timeout_s: Annotated[float, Field(description="How long wait=true waits at most.",
                                                       gt=0, le=3600)] = 300) -> JobStatus:
        """A run's or drain's state: round, cycle, elapsed time, tokens, cost, and its outcome with
        the reason code once it ended."""
        result = await _call(service.status, job)
        deadline, sent, seen = time.monotonic() + timeout_s, 0, None
        while wait and result["alive"] and time.monotonic() < deadline:
            now = (result["checkpoints"], result["state"], result["last_line"])
            if now != seen:
                sent, seen = sent + 1, now
                await ctx.report_progress(sent, None, f"{result['state']}: {result['last_line'] or 'starting'}")
            await anyio.sleep(POLL_S)
            result = await _call(service.status, job)
        return JobStatus(**result)

    @server.tool()
    async def stop(job: JobId) -> StopResult:
        """Stop a job as the first Ctrl-C does: a drain starts no new task (the running ones finish
        and land); a run stops after its next checkpoint and stays resumable."""
        return StopResult(**await _call(service.stop, job))

    @server.tool(annotations=READ_ONLY)
    async def transcript(task: TaskId) -> Transcript:
        """A task's runs round by round (proposal, critiques, synthesis, votes, validation, review,
        landing, outcome), as `mesh show` gives them; with MESH_SIGNING_KEY set, a step whose
        signature does not verify is marked untrusted (its `trust`)."""
        found = await _call(service.transcript, task)
        return Transcript(task=found["history"]["task"], runs=found["history"]["runs"],
                          untrusted=found["history"]["untrusted"], text=found["text"])

    @server.tool()
    async def report(task: TaskId) -> ReportWritten:
        """Write the task's HTML report (one self-contained page) under the repository's .mesh/reports/."""
        return ReportWritten(task=task, path=str(await _call(service.report, task)))

    @server.tool(annotations=READ_ONLY)
    async def usage(task: Annotated[str | None, Field(description="Only this task's calls.")] = None,
                    since: Annotated[str | None, Field(description="Only calls from then on: YYYY-MM-DD, an ISO"
                                                                   " date-time, or 12h / 7d / 2w ago.")] = None
                    ) -> UsageSummary:
        """Tokens, cache reads and writes, and dollars, by task, role, model and day, like `mesh usage`."""
        return UsageSummary(**await _call(service.usage, task, since))

    @server.resource("mesh://tasks/{task}/transcript", mime_type="text/plain")
    async def task_transcript(task: str) -> str:
        """A task's run history as text (mesh show)."""
        return (await _call(service.transcript, task))["text"]

    @server.resource("mesh://tasks/{task}/report", mime_type="text/html")
    async def task_report(task: str) -> str:
        """A task's HTML report (mesh report)."""
        return await _call(service.report_html, task)

    @server.resource("mesh://scopes/label/{label}/log", mime_type="text/plain")
    async def label_log(label: str) -> str:
        """The git log of a plan label's integration branch: what landed, newest first."""
        return await _call(service.branch_log, label, None)

    @server.resource("mesh://scopes/epic/{epic}/log", mime_type="text/plain")
    async def epic_log(epic: str) -> str:
        """The git log of an epic's integration branch: what landed, newest first."""
        return await _call(service.branch_log, None, epic)
