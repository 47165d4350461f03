"""Terminal injection (issue 16, item 3): tracker and model text never reaches a terminal raw.

A workspace is seeded with hostile text in every field a person or a model can fill: the
issue fields (title, description, design, acceptance, notes, labels, assignee, external ref,
close reason, metadata), comment bodies and authors, an issue id and a dependency type; and,
through a real ``mesh run`` (replay backend), every checkpoint artifact: plan steps, critique
points, vote reasons, review findings (their ids and text) and summaries, revision steps. The
hostile text holds what the attack review got through: ``ESC[2J`` (clear screen), ``ESC]0;``
(window title), ``ESC]52;c;<base64>`` (clipboard write), 8-bit CSI and OSC (U+009B, U+009D),
DEL, and bidirectional overrides, isolates and marks.

Then every command that prints that text runs, in-process (CliRunner) and as a real process
whose stdout is a pipe, not a terminal: its human output holds none of those characters,
and its ``--json`` output decodes to exactly what was stored.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.views.live import LineSink, summary_lines
from tests.runkit import TASK, demo_script, make_workspace, r
from tracker.safe_text import clip, inert, json_text, printable

BIN = Path(sys.executable).parent
HOSTILE = ("T\x1b[2J\x1b]0;owned\x07\x1b]52;c;ZXZpbA==\x07\u202eX\u202d\u2066\u2067\u2068\u2069\u200e\u200f"
           "\u061c\u202a\u202b\u202c\x9b31m\x9d0;t\x9c\x7f\x08\r\x1bc")
# What must never reach the terminal: C0 but newline and tab, DEL, C1, bidirectional controls.
FORBIDDEN = ({chr(c) for c in range(0x20) if chr(c) not in "\n\t"} | {chr(c) for c in range(0x7F, 0xA0)}
             | set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"))


def assert_inert(text: str, where: str) -> None:
    found = sorted({f"U+{ord(ch):04X}" for ch in text if ch in FORBIDDEN})
    assert not found, f"{where} printed {found}:\n{text[:2000]}"


def hostile(tag: str) -> str:
    return f"{tag} {HOSTILE}"


# ---------------------------------------------------------------- the escaping itself


def test_printable_escapes_every_control_and_bidi_character_and_nothing_else():
    text = printable(HOSTILE + "\nline two\tcol")
    assert_inert(text.replace("\n", "").replace("\t", ""), "printable")
    assert "\\u001b[2J" in text and "\\u202e" in text and "\\u009b" in text and "\\u007f" in text
    assert text.endswith("\nline two\tcol")
    assert "\n" not in printable("a\nb", one_line=True) and printable("a\r\nb") == "a\nb"
    for kept in ("plain ascii", "日本語 ✓ café", "emoji 🎉", "tab\tand\nnewline"):
        assert printable(kept) == kept
    assert printable("\U000e0001") == "\\U000e0001"
    assert clip(HOSTILE * 10, 20).endswith("…") and len(clip(HOSTILE * 10, 20)) == 20
    # A tab moves no line: a one-line field (a drain line quoting `go test`) prints it as a tab.
    assert clip("ok  \tgithub.com/x/cmp\t1.9s\nnext", 100) == "ok  \tgithub.com/x/cmp\t1.9s\\u000anext"


def test_json_text_is_exact_and_escapes_what_a_terminal_obeys():
    value = {"title": HOSTILE, HOSTILE: [HOSTILE]}
    text = json_text(value, indent=2)
    assert json.loads(text) == value
    assert not {ch for ch in text if ord(ch) < 0x20 and ch not in "\n" or 0x7F <= ord(ch) < 0xA0}
    assert "\u202e" in text  # bidi text is data: kept as it is, as bd prints it
    assert inert({HOSTILE: [HOSTILE, 1, None]}) == {printable(HOSTILE, one_line=True): [printable(HOSTILE, one_line=True), 1, None]}


# ---------------------------------------------------------------- the seeded workspace


def hostile_script() -> dict:
    """The demo's script (one review cycle with a MUST_FIX finding, then approval) with
    hostile text in every free-text field of every artifact."""
    script = demo_script()
    for role, entries in script.items():
        for k, entry in enumerate(entries):
            text = entry["text"]  # some answers wrap their JSON in prose and a fence
            art = json.loads(text[text.index("{"):text.rindex("}") + 1])
            name = entry["round"]
            if name == "proposal":
                art["plan"] = [hostile("plan step"), *art["plan"][1:]]
                art["assumptions"] = [hostile("assumption")]
            elif name == "critique":
                art["findings"] = [hostile("critique point")]
                art["must_fix"] = [hostile("must fix")] if art["must_fix"] else []
            elif name == "vote":
                art["reason"] = hostile(f"vote reason of {role}")
            elif name in ("synthesis", "revision"):
                for d in art.get("decision_log", []):
                    d["point"], d["reason"] = hostile("point"), hostile("reason")
            elif name == "review":
                for f in art.get("findings", []):
                    f.update(finding_id=f["finding_id"] + HOSTILE, issue=hostile("finding"),
                             evidence=hostile("evidence"))
                art["summary"] = hostile("review summary")
            elif name == "revision-plan":
                art["summary"] = hostile("plan summary")
                for step in art["steps"]:
                    step.update(finding_id=step["finding_id"] + HOSTILE, change=hostile("change"))
            entries[k] = r(name, art)
    return script


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """The demo workspace after a hostile run, plus a hostile issue with every field set."""
    tmp = tmp_path_factory.mktemp("terminal")
    ws = make_workspace(tmp)
    with ws.tracker() as t:
        t.update(TASK, description=hostile("task description") + "\nsecond line", design=hostile("design"),
                 acceptance_criteria=hostile("acceptance"), notes=hostile("notes"))
        t.add_label(TASK, hostile("label"))
        t.add_comment(TASK, hostile("comment body") + "\nline two", author=hostile("author"))
    code, report, res = ws.run(hostile_script(), "--label", "plan:demo")
    assert code == 0 and report["outcome"] == "closed", res.output
    with ws.tracker() as t:
        bad_id = t.create(hostile("title"), issue_id="demo-bad" + HOSTILE, description=hostile("description"),
                          design=hostile("design"), acceptance_criteria=hostile("acceptance"), notes=hostile("notes"),
                          assignee=hostile("assignee"), labels=[hostile("label"), "plan:demo"],
                          external_ref=hostile("ref"))["id"]
        t.update(bad_id, metadata={HOSTILE: HOSTILE})
        t.add_comment(bad_id, hostile("comment"), author=hostile("author"))
        t.add_dependency(bad_id, TASK, hostile("type"))
        other = t.create(hostile("closed one"))["id"]
        t.close_issue(other, reason=hostile("close reason"))
        gate = t.gate_create(hostile("gate"), blocks=bad_id, await_type="timer", timeout_ns=1, await_id=hostile("await"))
    return {"ws": ws, "report": report, "bad": bad_id, "closed": other, "gate": gate["id"]}


def tracker_commands(s: dict) -> list[list[str]]:
    bad, closed = s["bad"], s["closed"]
    return [
        ["show", TASK, bad, closed], ["list", "--all"], ["list", "--label", "plan:demo"], ["ready", "-n", "0"],
        ["ready", "--type", "gate"], ["blocked"], ["comments", TASK], ["comments", bad], ["where"], ["info"],
        ["epic", "status"], ["doctor", "--check", "pollution"], ["show", "no-such" + HOSTILE],
        ["label", "add", bad, hostile("new label")], ["dep", "add", bad, closed, "-t", hostile("edge")],
        ["update", bad, "--notes", hostile("new notes")], ["note", bad, hostile("note")],
        ["reopen", closed, "--reason", hostile("reopen")], ["close", closed, "--reason", hostile("closing")],
        ["create", hostile("new issue"), "-d", hostile("d")], ["gate", "check"], ["slot", "show", bad],
        ["comments", "add", bad, hostile("added")],
    ]


def test_every_tracker_command_prints_hostile_text_inert(seeded):
    ws = seeded["ws"]
    for args in tracker_commands(seeded):
        res = ws.mesh("tracker", *args)
        assert_inert(res.stdout, f"mesh tracker {args[0]}")
        assert_inert(res.stderr, f"mesh tracker {args[0]} (stderr)")
        assert res.stdout.strip() or res.stderr.strip(), args
    shown = ws.mesh("tracker", "show", seeded["bad"]).stdout
    assert "\\u001b]52;c;" in shown and "\\u202e" in shown  # shown, as an escape


def test_tracker_json_is_the_exact_stored_text(seeded):
    ws, bad = seeded["ws"], seeded["bad"]
    (issue,) = json.loads(ws.mesh("tracker", "show", bad, "--json").stdout)
    assert issue["id"] == "demo-bad" + HOSTILE and issue["title"] == hostile("title")
    assert (issue["description"], issue["assignee"], issue["metadata"]) == (
        hostile("description"), hostile("assignee"), {HOSTILE: HOSTILE})
    assert hostile("label") in issue["labels"]
    comments = json.loads(ws.mesh("tracker", "comments", bad, "--json").stdout)
    assert (comments[0]["text"], comments[0]["author"]) == (hostile("comment"), hostile("author"))
    listed = json.loads(ws.mesh("tracker", "list", "--all", "--json").stdout)
    assert hostile("title") in [i["title"] for i in listed]
    raw = ws.mesh("tracker", "list", "--all", "--json").stdout
    assert not {ch for ch in raw if ch in FORBIDDEN - set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
                                                                "\u200e\u200f\u061c")}


def test_mesh_show_status_logs_and_usage_print_hostile_artifacts_inert(seeded):
    ws = seeded["ws"]
    shown = ws.mesh("show", TASK)
    assert shown.exit_code == 0, shown.output
    assert_inert(shown.stdout, "mesh show")
    for piece in ("plan step", "must fix", "vote reason", "review summary", "finding", "change", "[F1"):
        assert piece in shown.stdout, piece
    history = json.loads(ws.mesh("show", TASK, "--json").stdout)
    artifacts = [step["artifact"] for run in history["runs"] for step in run["steps"]]
    assert hostile("plan step") in next(a["plan"] for a in artifacts if "plan" in a)
    assert "F1" + HOSTILE in [f["finding_id"] for a in artifacts for f in a.get("findings", [])
                               if isinstance(f, dict)]
    for args in (["show", seeded["bad"]], ["status", "--label", "plan:demo", "--repo", str(ws.repo)],
                 ["logs", "-n", "0"], ["logs", "-v", "-n", "3"], ["usage"], ["show", "no-such" + HOSTILE]):
        res = ws.mesh(*args, "--repo", str(ws.repo)) if args[0] in ("logs", "usage") else ws.mesh(*args)
        assert_inert(res.stdout, f"mesh {args[0]}")
        assert_inert(res.stderr, f"mesh {args[0]} (stderr)")


def test_the_run_report_and_progress_lines_print_hostile_findings_and_mutations_inert(seeded):
    from orchestrator.protocol.outcomes import RunReport
    from orchestrator.views.report import render_report

    report = dict(seeded["report"])
    report.update(mutations=[*report["mutations"], hostile("mutation") + "\nforged: line"],
                  review={**report["review"], "review_issue": "x" + HOSTILE,
                          "subtasks": {"F1" + HOSTILE: hostile("sub")}},
                  validation=[{"command": hostile("cmd"), "exit_code": 0, "passed": True, "rejected": False}])
    fields = {k: v for k, v in report.items() if k in RunReport.__dataclass_fields__}
    text = render_report(RunReport(**fields))
    assert_inert(text, "the run report")
    assert "forged: line" in text and "\nforged" not in text  # a field cannot start a line of its own

    # A hostile run's own report and progress lines, as the CLI prints them without --json.
    ws = make_workspace(seeded["ws"].root / "again")
    res = ws.mesh("run", "--label", "plan:demo", "--backend", "replay", "--script",
                  str(ws.write_script(hostile_script(), "again.json")), "--repo", str(ws.repo))
    assert res.exit_code == 0, res.output
    assert_inert(res.stdout, "mesh run report")
    assert_inert(res.stderr, "mesh run progress")
    assert "vote reason" in res.stderr and "findings:" in res.stdout


def test_drain_lines_and_summary_print_hostile_text_inert():
    import io

    stream = io.StringIO()
    sink = LineSink(stream)
    for event in ({"event": "task_started", "task": "x" + HOSTILE, "title": hostile("title"), "t": 1.0},
                  {"event": "checkpoint", "task": "x", "line": hostile("[orch:review]"), "t": 2.0},
                  {"event": "task_finished", "task": "x", "state": "blocked", "block_reason": "no_response",
                   "block_detail": hostile("detail") + "\nforged", "elapsed_s": 1.0, "cost_usd": 0.0, "t": 3.0},
                  {"event": "task_skipped", "task": "x", "why": hostile("why"), "t": 4.0}):
        sink(event)
    assert_inert(stream.getvalue(), "drain lines")
    assert len(stream.getvalue().splitlines()) == 4
    summary = {"branch": "mesh/land/x" + HOSTILE, "stop_reason": "done", "closed": [], "blocked": {"x": hostile("r")},
               "skipped": [hostile("skipped")], "errors": [hostile("err")], "landings": 0, "conflicts": 0,
               "wall_s": 1.0, "task_s": 1.0, "calls": 0, "tokens": 0, "cost_usd": 0.0, "remote": None}
    assert_inert("\n".join(summary_lines(summary)), "drain summary")


# ---------------------------------------------------------------- real processes, stdout a pipe


def test_bd_and_mesh_as_real_processes_with_stdout_a_pipe(seeded):
    ws = seeded["ws"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MESH_", "BEADS_", "BD_"))}
    env.update(BEADS_DB=str(ws.db), MESH_DB=str(ws.db), MESH_ACTOR="tester", TERM="xterm-256color")

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), cwd=ws.root, env=env, capture_output=True, timeout=120)

    for args in tracker_commands(seeded)[:13]:
        for argv in ([str(BIN / "bd"), *args], [str(BIN / "mesh"), "tracker", *args]):
            done = run(*argv)
            out, err = done.stdout.decode("utf-8"), done.stderr.decode("utf-8")
            assert_inert(out, " ".join(argv[:3]))
            assert_inert(err, " ".join(argv[:3]) + " (stderr)")
    done = run(str(BIN / "bd"), "show", seeded["bad"], "--json")
    assert json.loads(done.stdout)[0]["title"] == hostile("title")
    for argv in (["show", TASK], ["show", seeded["bad"]], ["status", "--label", "plan:demo", "--repo", str(ws.repo)]):
        done = run(str(BIN / "mesh"), *argv)
        assert_inert(done.stdout.decode("utf-8"), f"mesh {argv[0]}")
        assert_inert(done.stderr.decode("utf-8"), f"mesh {argv[0]} (stderr)")
    assert b"\\u001b" in run(str(BIN / "mesh"), "show", TASK).stdout
