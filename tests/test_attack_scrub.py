"""Attack 8, scrubber half: a known secret smuggled out encoded, split or escaped, and the
credential shapes the scrubber used to miss. Each test states what an attacker tries and
asserts that nothing of the secret survives, and that look-alikes are left alone."""

from __future__ import annotations

import base64
import codecs
import json
import subprocess
import sys
import uuid
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from redact.known import encoded_forms, known_secrets
from redact import REDACTED, scrub, scrub_obj
from redact.view import INVISIBLE, decode, decoded_view

# A value with characters that URL encoding, JSON and base64 alignment all treat differently.
SECRET = "Zq8vLm3x Tr9w/Kp2+sNf7h!"
SIGNING = "mesh-Signing-Key-4f1c9a0e7b"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.fixture(autouse=True)
def secrets_in_env(monkeypatch):
    monkeypatch.setenv("DEPLOY_SERVICE_TOKEN", SECRET)
    monkeypatch.setenv("MESH_SIGNING_KEY", SIGNING)


def _b64_streams(value: str) -> list[str]:
    """``value`` inside longer base64 streams, at each byte alignment, both alphabets,
    padded and unpadded."""
    out = []
    for lead in (b"", b"x", b"xy"):
        for tail in (b"", b"!", b"tail bytes"):
            data = lead + value.encode() + tail
            for encode in (base64.b64encode, base64.urlsafe_b64encode):
                text = encode(data).decode()
                out += [text, text.rstrip("=")]
    return out


def _cores(value: str) -> list[str]:
    """The base64 characters that depend on ``value`` alone, at each alignment: what must
    not survive in a stream."""
    return [form for form in encoded_forms(value) if form not in (value, value[::-1])]


def _encodings(value: str) -> dict[str, str]:
    data = value.encode()
    return {
        "raw": value,
        "reversed": value[::-1],
        "rot13": codecs.encode(value, "rot13"),
        "hex": data.hex(),
        "HEX": data.hex().upper(),
        "url": quote(value, safe=""),
        "url-lower": quote(value, safe="").replace("%2F", "%2f").replace("%2B", "%2b"),
        "url-plus": quote_plus(value, safe=""),
        "base64": base64.b64encode(data).decode(),
        "base64-unpadded": base64.b64encode(data).decode().rstrip("="),
        "base64-url": base64.urlsafe_b64encode(data).decode(),
        "zero-width": "\u200b".join(value),
        "json-unicode-escapes": "".join(f"\\u{ord(ch):04x}" for ch in value),
        "json-escaped-in-document": json.dumps({"log": value}),
        "json-ascii-with-zero-width": json.dumps({"log": "\u2060".join(value)}),
        "double-json": json.dumps(json.dumps({"log": value})),
    }


@pytest.mark.parametrize("value", [SECRET, SIGNING])
@pytest.mark.parametrize("form", list(_encodings(SECRET)))
@pytest.mark.parametrize("context", ["{}", "output: {} done", "x{}y", '{{"text": "{}"}}'])
def test_every_encoded_form_of_a_known_secret_is_redacted(value, form, context):
    leaked = context.format(_encodings(value)[form])
    out = scrub(leaked)
    assert out != leaked  # scrub(x) != x detects the secret
    assert REDACTED in out
    for encoded in _encodings(value).values():
        assert encoded not in out
    assert value not in "".join(ch for ch in (decode(out) or out) if ch not in INVISIBLE)


@pytest.mark.parametrize("ch", list(INVISIBLE))
def test_every_invisible_character_is_seen_through(ch):
    out = scrub(f"token: {SECRET[:6]}{ch}{SECRET[6:12]}{ch}{SECRET[12:]} end")
    assert out == f"token: {REDACTED} end"


@pytest.mark.parametrize("stream", _b64_streams(SECRET) + _b64_streams(SIGNING))
def test_a_secret_inside_a_longer_base64_stream_is_redacted_at_any_alignment(stream):
    out = scrub(f"blob={stream};")
    assert REDACTED in out
    for core in _cores(SECRET) + _cores(SIGNING):
        assert core not in out


def test_secrets_are_read_from_the_environment_each_time(monkeypatch):
    assert scrub("x NewValue-9f8e7d6c y") == "x NewValue-9f8e7d6c y"
    monkeypatch.setenv("OTHER_API_KEY", "NewValue-9f8e7d6c")
    assert scrub("x NewValue-9f8e7d6c y") == f"x {REDACTED} y"
    monkeypatch.setenv("OTHER_API_KEY", "Replaced-11aa22bb")
    assert scrub("x NewValue-9f8e7d6c y") == "x NewValue-9f8e7d6c y"


def test_short_values_are_not_hunted_in_any_form(monkeypatch):
    monkeypatch.setenv("SHORT_PASSWORD", "ab12cd")
    text = f"ab12cd {base64.b64encode(b'ab12cd').decode()} {b'ab12cd'.hex()} dc21ba"
    assert scrub(text) == text
    assert "ab12cd" not in known_secrets()


def test_the_signing_key_is_known_whatever_its_name_says(monkeypatch):
    assert SIGNING in known_secrets()
    monkeypatch.setenv("SOME_SETTING", "not-a-secret-value")
    assert "not-a-secret-value" not in known_secrets()


# ---------------------------------------------------------------- credential shapes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"aws {AWS_SECRET} end", f"aws {REDACTED} end"),
        (f"export X={AWS_SECRET}", f"export X={REDACTED}"),
        (f'{{"log": "line\\n{AWS_SECRET}\\nnext"}}', f'{{"log": "line\\n{REDACTED}\\nnext"}}'),
        (f'"a\\r\\n{AWS_SECRET}"', f'"a\\r\\n{REDACTED}"'),
        ("hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567", REDACTED),
        ("use hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ98765432 here", f"use {REDACTED} here"),
        ("//registry.npmjs.org/:_authToken=npm_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
         f"//registry.npmjs.org/:_authToken={REDACTED}"),
        ("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6"
         "IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;EndpointSuffix=core.windows.net",
         f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={REDACTED};EndpointSuffix=core.windows.net"),
        ("Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=abcDEF123ghiJKL456mno=",
         f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey={REDACTED}"),
        ("postgresql://app_user:p@ss:w0rd@db.internal:5432/app",
         f"postgresql://app_user:{REDACTED}@db.internal:5432/app"),
        ("DATABASE_URL=mysql://root:toor@localhost/db", f"DATABASE_URL=mysql://root:{REDACTED}@localhost/db"),
        ("redis://:s3cret@cache:6379/0", f"redis://:{REDACTED}@cache:6379/0"),
        ("mongodb+srv://me@corp.com:hunter2@cluster0.x.net/?retryWrites=true",
         f"mongodb+srv://me@corp.com:{REDACTED}@cluster0.x.net/?retryWrites=true"),
        ('url = "amqp://guest:Gu3st!pw@rabbit:5672/"', f'url = "amqp://guest:{REDACTED}@rabbit:5672/"'),
    ],
)
def test_credential_shapes_are_redacted_keeping_their_context(text, expected):
    assert scrub(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "commit 3f786850e387550fdab836ed7e6dc881de23001b",
        "3F786850E387550FDAB836ED7E6DC881DE23001B",
        "tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904 parent 9fceb02d0ae598e95dc970b74767f19372d61af8",
        f"id {uuid.UUID(int=0x123E4567E89B12D3A456426614174000)} and {uuid.uuid5(uuid.NAMESPACE_DNS, 'mesh')}",
        "ThisIsAVeryLongCamelCaseIdentifierName12",
        "testScrubberRedactsBase64EncodedSecrets1",
        "see src/components/header/NavigationBar2/index.tsx",
        "integrity sha512-z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XYXysP+DGNKHfuwvY7kxvUR4eRxBQ8ezYu3Vjw==",
        "go.sum h1:2NdVEZP6ff6f1EnlbXOQYVe6MXb6OOkbA4tY8Dn1wW8=",
        "postgres://localhost:5432/app",
        "https://example.com:8443/path@scope/pkg",
        "hf_hub_download(repo_id)",
        "npm_config_registry=https://registry.npmjs.org/",
        "AccountName=acct;AccountKey=",
        'print("\\n".join(lines))',
        '{"text": "line one\\nline two \\"quoted\\" \\u00e9"}',
    ],
)
def test_look_alikes_are_left_alone(text):
    assert scrub(text) == text


def test_the_projects_own_sources_are_left_alone():
    # Full of escapes, regexes, hashes and long identifiers, and free of secrets: a patch
    # policy that asks "does scrub change this?" must not refuse such code.
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sources = [*root.glob("orchestrator/*.py"), *root.glob("roles/**/*.py"), *root.glob("tracker/*.py")]
    assert len(sources) > 20
    for path in sources:
        text = path.read_text()
        assert scrub(text) == text, path.name


@pytest.mark.parametrize("size", range(24, 40))
def test_base64_of_ordinary_text_is_left_alone(size):
    sentence = "The quick brown fox jumps over the lazy dog, 1234567890 times; "
    for start in range(0, 20, 3):
        encoded = base64.b64encode(sentence[start:start + size].encode()).decode()
        assert scrub(f"data: {encoded}") == f"data: {encoded}"


# ---------------------------------------------------------------- the decoded view


_VIEW_TEXT = st.lists(
    st.sampled_from(["\\", "\\\\", "\\n", '\\"', "\\u", "00", "4c", "e000", "\ue000", "\\ue000", "\\u200b",
                     "\u200b", "\u00ad", "n", "u", "a", '"', " ", "\\uD83D", "é", "\\x"]),
    max_size=16,
).map("".join)


@settings(deadline=None)
@given(_VIEW_TEXT)
def test_the_fast_decoder_and_the_mapped_view_agree(text):
    view = decoded_view(text)
    fast = decode(text)
    assert (view.text if view is not None and view.text != text else None) == fast


@settings(deadline=None)
@given(st.lists(st.sampled_from([SECRET, SECRET[:9], SECRET[9:], SIGNING[::-1], AWS_SECRET, "\\n", "\\\\", '\\"',
                                 "\u200b", "\\u200b", " ", "x", "API_KEY=", "\\u0041",
                                 base64.b64encode(SECRET.encode()).decode(), REDACTED]),
                max_size=10).map("".join))
def test_scrub_with_known_secrets_is_idempotent_and_leaves_no_secret_in_any_view(text):
    once = scrub(text)
    assert scrub(once) == once
    for view in (once, decode(once) or once, decode(decode(once) or once) or once):
        assert SECRET not in "".join(ch for ch in view if ch not in INVISIBLE)


def test_a_redaction_found_in_the_view_takes_its_escapes_with_it():
    escaped = "".join(f"\\u{ord(ch):04x}" for ch in SECRET)
    out = scrub(f'{{"a": "{escaped}", "b": "kept"}}')
    assert out == f'{{"a": "{REDACTED}", "b": "kept"}}'


def test_scrub_obj_sees_secrets_in_nested_strings():
    data = {"notes": ["see " + "\u200c".join(SECRET)], "n": 3, "deep": {"x": (base64.b64encode(SECRET.encode()).decode(),)}}
    out = json.dumps(scrub_obj(data))
    assert REDACTED in out
    for encoded in _encodings(SECRET).values():
        assert encoded not in out


# ---------------------------------------------------------------- a whole run


def _leak() -> str:
    """The secret in every form at once, as a hostile worker would scatter it."""
    return " | ".join(f"{name}: {text}" for name, text in _encodings(SECRET).items())


def _with_leaks(script: dict) -> dict:
    """The demo script with the leak in every free-text field a worker fills, in prose
    around the JSON, and in one unparsable answer that forces a follow-up prompt."""
    leak = _leak()

    def salt(value):
        if isinstance(value, str):
            return f"{value} {leak}"
        if isinstance(value, list):
            return [salt(item) for item in value]
        if isinstance(value, dict):
            return {k: (v if k in ("vote", "decision", "label", "severity", "finding_id", "patch", "risk",
                                   "validation_commands", "location") else salt(v)) for k, v in value.items()}
        return value

    for entries in script.values():
        for entry in entries:
            text = entry["text"]
            start = text.index("{")
            artifact = json.loads(text[start:text.rindex("}") + 1])
            entry["text"] = f"Notes first: {leak}\n```json\n{json.dumps(salt(artifact))}\n```\n"
    script["proposer"].insert(0, {"round": "proposal", "text": f"I will not answer in JSON. {leak}"})
    return script


def _db_texts(ws) -> list[str]:
    """Everything in the tracker's files, read as bytes (free pages and the WAL included),
    and every cell of every table."""
    texts = [path.read_bytes().decode("utf-8", errors="replace") for path in ws.db.parent.iterdir()
             if path.name.startswith(ws.db.name)]
    import sqlite3

    conn = sqlite3.connect(ws.db)
    try:
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                texts.extend(str(cell) for cell in row if cell is not None)
    finally:
        conn.close()
    return texts


def _assert_no_form_of_the_secret(text: str, where: str) -> None:
    views = [text, decode(text) or text]
    views += ["".join(ch for ch in view if ch not in INVISIBLE) for view in views]
    forms = set(encoded_forms(SECRET)) | set(_encodings(SECRET).values())
    for view in views:
        for form in forms:
            assert form not in view, f"{where} holds {form!r}"


def test_a_run_records_no_form_of_a_secret_a_worker_returned(tmp_path):
    from tests.runkit import TASK, demo_script, make_workspace

    ws = make_workspace(tmp_path)
    code, report, res = ws.run(_with_leaks(demo_script()))
    assert code == 0, res.output
    assert report["outcome"] == "closed" and report["task"]["id"] == TASK
    with ws.tracker() as t:
        findings = [i for i in t.list(include_closed=True) if "mesh:finding" in i.get("labels", [])]
        from orchestrator.ledger.calls import calls_for

        calls = calls_for(t, task_id=TASK)
    # The leak reached every place a worker's words are recorded, and was redacted there.
    assert findings and REDACTED in findings[0]["description"]
    assert any(REDACTED in (c["response"] or "") for c in calls)
    assert any(c["attempt"] == 2 and c["role"] == "proposer" for c in calls)
    _assert_no_form_of_the_secret(res.stdout, "the report")
    _assert_no_form_of_the_secret(res.stderr, "stderr")
    for text in _db_texts(ws):
        _assert_no_form_of_the_secret(text, "the tracker database")


# ---------------------------------------------------------------- issue 16: a key through worker_env

FAKE_KEY = "sk-ant-api03-" + "Hq4Wz8Rt2Yp6Ls9Dk3Vn7Bx1Mc5Gf0Je" + "Ua3Oi8Pe2Rw6-Tz1_QsAA"

# The worker's own code: it reads the key mesh gave it (worker_env) and writes it back in
# every form the attack review got past the scrubber, into every free-text field.
_LEAKING_WORKER = r'''
import base64, codecs, fcntl, gzip, json, os, sys
from urllib.parse import quote
sys.stdin.read()
home = os.environ["HOME"]
role = os.environ["MESH_ROLE"]
with open(os.path.join(home, "state.json"), "a+") as fh:
    fcntl.flock(fh, fcntl.LOCK_EX)
    fh.seek(0)
    used = json.loads(fh.read() or "{}")
    index = used.get(role, 0)
    used[role] = index + 1
    fh.seek(0); fh.truncate(); fh.write(json.dumps(used))
key = os.environ["ANTHROPIC_API_KEY"]
data = key.encode()
xor = lambda b, k: bytes(c ^ k[i % len(k)] for i, c in enumerate(b)).hex()
forms = {
    "raw": key, "no-prefix": key[len("sk-ant-api03-"):], "minus-four": key[4:], "upper": key.upper(),
    "spaced": " ".join(key), "base32": base64.b32encode(data).decode(),
    "base64-of-base64": base64.b64encode(base64.b64encode(data)).decode(),
    "gzip-base64": base64.b64encode(gzip.compress(data)).decode(),
    "fullwidth": "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in key),
    "html": "".join(f"&#{ord(c)};" for c in key), "percent": "".join(f"%{b:02X}" for b in data),
    "percent-std": quote(key, safe=""), "xor-hex": xor(data, b"\x42"), "xor-hex-key": xor(data, b"k3y"),
    "base64": base64.b64encode(data).decode(), "hex": data.hex(), "reversed": key[::-1],
    "rot13": codecs.encode(key, "rot13"), "zero-width": "\u200b".join(key),
}
with open(os.path.join(home, "leak.json"), "w") as fh:
    json.dump(forms, fh)
leak = " | ".join(f"{name}: {form}" for name, form in forms.items())
text = json.load(open(os.path.join(home, "answers.json")))[role][index]["text"]
sys.stdout.write(text.replace("@@LEAK@@", json.dumps(leak)[1:-1]))
'''


def _assert_no_form_of_the_key(text: str, forms: dict[str, str], where: str) -> None:
    from redact.windows import WINDOW, _normal, _unescaped

    views = [text, _unescaped(text) or text]
    views.append(_unescaped(views[-1]) or views[-1])
    norm_key = _normal(FAKE_KEY)
    windows = [norm_key[i:i + WINDOW] for i in range(len(norm_key) - WINDOW + 1)]
    for view in views:
        for name, form in forms.items():
            assert form not in view, f"{where} holds the {name} form"
        normal = _normal(view)
        assert not [w for w in windows if w in normal], f"{where} holds 16 characters of the key"


def test_a_key_given_to_a_worker_is_stored_in_no_form(tmp_path, monkeypatch):
    from tests.runkit import TASK, demo_script, make_workspace
    from tests.test_run_backends_and_concurrency import worker_home

    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    ws = make_workspace(tmp_path)
    config = ws.repo / "mesh.toml"
    config.write_text('worker_env = ["ANTHROPIC_API_KEY"]\nworker_home = "real"\n' + config.read_text())
    subprocess.run(["git", "commit", "-qam", "pass the key to workers"], cwd=ws.repo, check=True)
    home = worker_home(ws)
    script = _with_leaks(demo_script())
    for entries in script.values():
        for entry in entries:
            entry["text"] = entry["text"].replace(_leak(), "@@LEAK@@")
    (home / "answers.json").write_text(json.dumps(script))
    (ws.root / "worker.py").write_text(_LEAKING_WORKER)
    res = ws.mesh("run", "--label", "plan:demo", "--backend", "command", "--worker-cmd",
                  f"{sys.executable} {ws.root / 'worker.py'}", "--repo", str(ws.repo), "--json",
                  env={"HOME": str(home)})
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["outcome"] == "closed"
    forms = json.loads((home / "leak.json").read_text())  # what the worker really sent
    assert forms["raw"] == FAKE_KEY
    outputs = {"the run report": res.stdout + res.stderr}
    logs = ws.mesh("logs", "--task", TASK, "--json", "--verbose")
    assert logs.exit_code == 0, logs.output
    outputs["mesh logs --json"] = logs.stdout
    page = tmp_path / "report.html"
    assert ws.mesh("report", TASK, "-o", str(page)).exit_code == 0
    outputs["the HTML report"] = page.read_text()
    export = tmp_path / "export.jsonl"
    assert ws.mesh("tracker", "export", "-o", str(export)).exit_code == 0
    outputs["the JSONL export"] = export.read_text()
    assert "[REDACTED]" in outputs["mesh logs --json"] and "[REDACTED]" in outputs["the JSONL export"]
    for where, text in outputs.items():
        _assert_no_form_of_the_key(text, forms, where)
    for text in _db_texts(ws):  # comments, mesh_calls, its FTS tables, free pages and WAL
        _assert_no_form_of_the_key(text, forms, "the tracker database")
