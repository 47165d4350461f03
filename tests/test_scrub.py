"""Secret scrubbing: credentials out, ordinary code and prose left alone."""

from __future__ import annotations


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from redact import REDACTED, scrub, scrub_obj

# Fake credentials, shaped like the real ones (none of them is live).
ANTHROPIC = "sk-ant-api03-" + "Ab3dEf6hIj9" * 8
OPENAI = "sk-proj-" + "Z9y8X7w6V5u4T3s2R1q0" * 2
OPENAI_LEGACY = "sk-" + "a1B2c3D4e5F6g7H8i9J0" * 2 + "k1L2m3N4"
GITHUB = {prefix: prefix + "R4nd0mT0k3nV4lu3xYz" * 2 for prefix in ("ghp_", "gho_", "ghs_", "ghu_")}
GITHUB_PAT = "github_pat_11ABCDEFG0" + "x1Y2z3" * 10
GITLAB = "glpat-" + "aB3dE6gH9jK2mN5pQ8sT"
SLACK = "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp"
AWS_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SESSION_ID = "ASIAY34FZKBOKMUTVV7A"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GOOGLE = "AIza" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"
STRIPE_LIVE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
STRIPE_RESTRICTED = "rk_live_" + "51H8xYzAbCdEfGhIj0KlMn"
JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM2Bo\n"
    "b3dEf6hIj9kL2mN5pQ8sT1vW4yZ7bC0eF3hJ6k==\n-----END RSA PRIVATE KEY-----"
)


@pytest.mark.parametrize(
    "secret",
    [ANTHROPIC, OPENAI, OPENAI_LEGACY, *GITHUB.values(), GITHUB_PAT, GITLAB, SLACK, AWS_ID, AWS_SESSION_ID,
     GOOGLE, STRIPE_LIVE, STRIPE_RESTRICTED, JWT],
)
@pytest.mark.parametrize("context", ["{}", "value: {}", '"{}"', "({})", "x={}&y=1", "\n{}\n"])
def test_shaped_credentials_are_redacted_anywhere(secret, context):
    out = scrub(context.format(secret))
    assert secret not in out
    assert REDACTED in out
    # Nothing of the secret's random tail survives either.
    assert secret[-8:] not in out


def test_pem_private_keys_complete_and_truncated():
    text = f"before\n{PEM}\nafter"
    assert scrub(text) == f"before\n{REDACTED}\nafter"
    truncated = "log tail:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAA\n"
    assert "b3BlbnNzaC1rZXkt" not in scrub(truncated)
    pgp = "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF0abc\n-----END PGP PRIVATE KEY BLOCK-----"
    assert scrub(pgp) == REDACTED


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("API_KEY=abc123def456ghi", "API_KEY=[REDACTED]"),
        ("export MY_SERVICE_TOKEN=Zx9Qw8Er7Ty6", "export MY_SERVICE_TOKEN=[REDACTED]"),
        ("DB_PASSWORD=hunterhunter", "DB_PASSWORD=[REDACTED]"),
        ("CLIENT_SECRET='s3cr3t-value-1'", "CLIENT_SECRET='[REDACTED]'"),
        ("aws_secret_access_key = " + AWS_SECRET, "aws_secret_access_key = [REDACTED]"),
        ("password: correct-horse-battery", "password: [REDACTED]"),
        ("passwd=Tr0ub4dor&3", "passwd=[REDACTED]&3"),
        ("secret: 'abcdefgh1234'", "secret: '[REDACTED]'"),
        ("token=9f8e7d6c5b4a", "token=[REDACTED]"),
        ("apikey=ab12cd34ef56", "apikey=[REDACTED]"),
        ('{"api_key": "k3y-v4lu3-123"}', '{"api_key": "[REDACTED]"}'),
        ("{'password': 'letmein123'}", "{'password': '[REDACTED]'}"),
        ('"client_secret":"0123456789abcdef"', '"client_secret":"[REDACTED]"'),
        ("api_key: str = 'hunter22hunter'", "api_key: str = '[REDACTED]'"),
        ("'password' => 'abcdefgh1'", "'password' => '[REDACTED]'"),
        ("curl --password s3cretpass1 host", "curl --password [REDACTED] host"),
        ("https://example.com/cb?access_token=ya29a0AfH6SMB&x=1", "https://example.com/cb?access_token=[REDACTED]&x=1"),
        ("Authorization: Bearer abcdef1234567890", "Authorization: Bearer [REDACTED]"),
        ("authorization: Basic dXNlcjpwYXNzd29yZA==", "authorization: Basic [REDACTED]"),
        ("Proxy-Authorization: Token 9a8b7c6d5e4f", "Proxy-Authorization: Token [REDACTED]"),
        ("curl -H 'Authorization: Bearer x9y8z7w6v5u4'", "curl -H 'Authorization: Bearer [REDACTED]'"),
        ("headers = {'X-Api-Key': 'abc123def456'}", "headers = {'X-Api-Key': '[REDACTED]'}"),
        ("https://user:pa55word@example.com/x", "https://user:[REDACTED]@example.com/x"),
        ("postgres://admin:s3cr3t@db:5432/app", "postgres://admin:[REDACTED]@db:5432/app"),
        ("token secret=abc123def", "token secret=[REDACTED]"),
        ('token = "see password=abc12345"', 'token = "see password=[REDACTED]"'),
    ],
)
def test_assignments_keep_their_names(text, expected):
    assert scrub(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "token = tokens[0]",
        'key = "name"',
        "key = 'abcdef123456'",
        "monkey = 'abcdef123456'",
        "max_tokens = 8192",
        "input_tokens: 123456789",
        "tokenizer = 'bert-base-uncased'",
        'sort_key = "created_at_timestamp"',
        "primary_key=True",
        "password = self.password",
        "password = get_password()",
        "connect(user=user, password=password)",
        "connect(password=db_password)",
        "SECRET_KEY = os.environ['SECRET_KEY']",
        "API_KEY=${API_KEY}",
        "token: ${{ secrets.GITHUB_TOKEN }}",
        "password: <your password here>",
        "password = None",
        "api_key = settings.ANTHROPIC_API_KEY",
        "password=********",
        "the bearer token is sent in a header",
        "Bearer authentication",
        "sk-learn-compatible-estimator-name",
        "git@github.com:org/repo.git",
        "https://example.com:8443/path?q=1",
        "https://user@example.com/",
        "private_key: |",
        "def check_token(token: str) -> bool:",
        "if password == confirm_password:",
        "self.api_key = api_key",
        "x-api-key is the header name",
    ],
)
def test_ordinary_code_and_prose_are_left_alone(text):
    assert scrub(text) == text


def test_real_source_code_is_untouched():
    from pathlib import Path

    for module in ("sandbox/validation.py", "config.py", "worktree/gitops.py", "worktree/patchcheck.py"):
        source = (Path(__file__).resolve().parents[1] / "orchestrator" / module).read_text()
        assert scrub(source) == source, module


def test_environment_secret_values_are_redacted(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_API_KEY", "plainlookingvalue")
    monkeypatch.setenv("DEPLOY_TOKEN", "another value with spaces")
    monkeypatch.setenv("SHORT_SECRET", "short")
    monkeypatch.setenv("KEYBOARD_LAYOUT", "us-international")
    text = "log: plainlookingvalue / another value with spaces / short / us-international"
    assert scrub(text) == f"log: {REDACTED} / {REDACTED} / short / us-international"


def test_environment_value_inside_the_marker_does_not_break_idempotence(monkeypatch):
    monkeypatch.setenv("WEIRD_TOKEN", "REDACTED")
    once = scrub("a REDACTED b")
    assert scrub(once) == once


def test_scrub_obj_recurses_and_keeps_keys():
    data = {
        "api_key": "plainvalue1",
        "password": "letmeinplease",
        "nested": [f"Authorization: Bearer {JWT}", ("tuple", ANTHROPIC)],
        "max_tokens": 8192,
        "token": "short",
        "note": None,
        7: "seven",
    }
    out = scrub_obj(data)
    assert out == {
        "api_key": REDACTED,
        "password": REDACTED,
        "nested": [f"Authorization: Bearer {REDACTED}", ("tuple", REDACTED)],
        "max_tokens": 8192,
        "token": "short",
        "note": None,
        7: "seven",
    }
    assert data["api_key"] == "plainvalue1"  # the input is not mutated


def test_empty_and_non_secret_text():
    assert scrub("") == ""
    assert scrub("hello world") == "hello world"


_FRAGMENTS = st.sampled_from([
    ANTHROPIC, JWT, AWS_ID, GITLAB, "API_KEY=", "password: ", "token=", "Bearer ", "Authorization: ",
    "https://u:", "@host/", "secret='", "'", '"', " ", "\n", "=", ":", "abc123def456", "tokens[0]",
    "-----BEGIN PRIVATE KEY-----", "-----END PRIVATE KEY-----", REDACTED, "[", "]", "--token ", "_KEY",
    "sk-", "eyJ", "x.", "ghp_", "A", "é",
])


@settings(deadline=None)
@given(st.lists(_FRAGMENTS, max_size=12).map("".join))
def test_scrub_is_idempotent(text):
    once = scrub(text)
    assert scrub(once) == once


@settings(deadline=None)
@given(st.text(max_size=200))
def test_scrub_never_fails_and_is_idempotent_on_any_text(text):
    once = scrub(text)
    assert scrub(once) == once
