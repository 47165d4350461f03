"""Issue 16 item 5: any 16 characters of a known secret are redacted, however written.

Each encoding below is one a worker holding the key used to get it past the scrubber; the
tests put a window of the secret (or all of it) through it and check that nothing of the
window survives, in the text or in any decoded view of it. Property tests run under the
profiles of tests/conftest.py: derandomized in CI, `make fuzz` for long random runs.
"""

from __future__ import annotations

import base64
import codecs
import gzip
import html
import json
import os
import zlib
from collections.abc import Callable
from contextlib import contextmanager
from urllib.parse import quote

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from redact import REDACTED, scrub
from redact.windows import WINDOW, _normal

KEY = "sk-ant-api03-" + "Qm7Zr2Xv9Lp4Tn8Wk3Hs6Dj1Fb5Gc0YaUe2Ri9Ot4Np7Sw3Kx1-Vb8Hy5AA"
TOKEN = "Zq8vLm3x Tr9w/Kp2+sNf7h!"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def _xor_hex(data: bytes, key: bytes) -> str:
    return bytes(b ^ key[i % len(key)] for i, b in enumerate(data)).hex()


def _fullwidth(text: str) -> str:
    return "".join(chr(ord(ch) + 0xFEE0) if "!" <= ch <= "~" else ch for ch in text)


# name -> encoder: every form the attack review got through, and the ones caught before.
ENCODINGS: dict[str, Callable[[str], str]] = {
    "raw": lambda s: s,
    "upper": str.upper,
    "lower": str.lower,
    "spaced": " ".join,
    "dashed": "-".join,
    "zero-width": "\u200b".join,
    "fullwidth": _fullwidth,
    "html-decimal": lambda s: "".join(f"&#{ord(ch)};" for ch in s),
    "html-hex": lambda s: "".join(f"&#x{ord(ch):x};" for ch in s),
    "html-named": lambda s: html.escape(s).replace("a", "&#97;"),
    "percent-all": lambda s: "".join(f"%{b:02X}" for b in s.encode()),
    "percent-std": lambda s: quote(s, safe=""),
    "json-unicode": lambda s: "".join(f"\\u{ord(ch):04x}" for ch in s),
    "hex": lambda s: s.encode().hex(),
    "hex-upper-spaced": lambda s: " ".join(f"{b:02X}" for b in s.encode()),
    "base64": lambda s: base64.b64encode(s.encode()).decode(),
    "base64-upper": lambda s: base64.b64encode(s.encode()).decode().upper(),
    "base64-url-in-stream": lambda s: base64.urlsafe_b64encode(b"xy" + s.encode() + b"tail").decode(),
    "base64-mime": lambda s: base64.encodebytes(b"header bytes " * 5 + s.encode()).decode(),
    "base64-of-base64": lambda s: base64.b64encode(base64.b64encode(s.encode())).decode(),
    "gzip-base64": lambda s: base64.b64encode(gzip.compress(s.encode())).decode(),
    "zlib-base64": lambda s: base64.b64encode(zlib.compress(s.encode())).decode(),
    "base32": lambda s: base64.b32encode(s.encode()).decode(),
    "base32-lower": lambda s: base64.b32encode(s.encode()).decode().lower().rstrip("="),
    "reversed": lambda s: s[::-1],
    "rot13": lambda s: codecs.encode(s, "rot13"),
    "xor-one-byte": lambda s: _xor_hex(s.encode(), b"\xa7"),
    "xor-three-bytes": lambda s: _xor_hex(s.encode(), b"k3y"),
    "xor-eight-bytes": lambda s: _xor_hex(s.encode(), b"8bytekey"),
    "percent-of-base64": lambda s: quote(base64.b64encode(s.encode()).decode(), safe=""),
}


@contextmanager
def known(**values: str):
    """``values`` in the environment for the block (a Hypothesis test cannot take
    monkeypatch: one example's setting must not outlive it)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def leaked_windows(text: str, secret: str) -> list[bytes]:
    """The 16-character windows of ``secret`` (normalised) that ``text`` still shows."""
    norm_secret, norm_text = _normal(secret), _normal(text)
    return [norm_secret[i:i + WINDOW] for i in range(len(norm_secret) - WINDOW + 1)
            if norm_secret[i:i + WINDOW] in norm_text]


def assert_no_leak(out: str, secret: str, encoded: str) -> None:
    assert REDACTED in out
    assert encoded not in out
    assert not leaked_windows(out, secret)
    assert scrub(out) == out


@pytest.mark.parametrize("name", list(ENCODINGS))
@pytest.mark.parametrize("part", ["whole", "without-prefix", "minus-four", "window"])
@pytest.mark.parametrize("context", ["{}", "log: {} end", '{{"text": "{}"}}', "x{}y"])
def test_every_encoding_of_a_key_window_is_redacted(name, part, context):
    piece = {"whole": KEY, "without-prefix": KEY[len("sk-ant-api03-"):], "minus-four": KEY[4:],
             "window": KEY[20:20 + WINDOW]}[part]
    encoded = ENCODINGS[name](piece)
    with known(ANTHROPIC_API_KEY=KEY):
        out = scrub(context.format(encoded))
    assert_no_leak(out, piece, encoded)


@pytest.mark.parametrize("name", list(ENCODINGS))
def test_a_value_with_spaces_and_symbols_is_found_in_every_encoding(name):
    encoded = ENCODINGS[name](TOKEN)
    with known(DEPLOY_SERVICE_TOKEN=TOKEN):
        out = scrub(f"value: {encoded}")
    assert_no_leak(out, TOKEN, encoded)


def test_ordinary_text_is_left_alone_with_a_key_known():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    with known(ANTHROPIC_API_KEY=KEY, DEPLOY_SERVICE_TOKEN=TOKEN):
        for path in [*root.glob("orchestrator/*.py"), *root.glob("redact/*.py"), *root.glob("roles/**/*.py")]:
            text = path.read_text()
            assert scrub(text) == text, path.name
        # Fewer than 16 characters of the key, or its prefix alone, are not a leak.
        for text in (KEY[:15], "sk-ant-api03-", KEY[30:45], "0000000000000000000000000"):
            assert scrub(f"see {text} here") == f"see {text} here"


def test_low_variety_windows_are_not_hunted():
    # A secret padded with a repeated character would otherwise redact every run of it.
    with known(SOME_TOKEN="aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaX9"):
        assert scrub("row: aaaaaaaaaaaaaaaaaaaaaaaaa") == "row: aaaaaaaaaaaaaaaaaaaaaaaaa"


def test_a_gzip_bomb_is_bounded():
    bomb = base64.b64encode(gzip.compress(b"A" * (64 << 20))).decode()
    with known(ANTHROPIC_API_KEY=KEY):
        assert scrub(f"blob {bomb}") == f"blob {bomb}"


# ---------------------------------------------------------------- properties

# Printable ASCII without the escape introducers: a secret holding "\\b" or "%56" loses
# characters to the escape view when its leak mixes HTML entities in (found by `make fuzz`:
# secret '0000000001234%56"7' written '0000000001234%56&quot;7'; docs/security.md states it).
_SECRETS = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="\\%&"),
                   min_size=WINDOW, max_size=48).filter(
    lambda s: len(_normal(s)) >= WINDOW and len(set(_normal(s))) >= 8)
_FILLER = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)


@given(secret=_SECRETS, start=st.integers(0, 32), name=st.sampled_from(sorted(ENCODINGS)), before=_FILLER,
       after=_FILLER)
@example(secret=KEY, start=4, name="raw", before="", after="")
@example(secret=TOKEN, start=0, name="zero-width", before="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", after="")
# Found by `make fuzz`: a zlib stream's base64 glued to base64-looking text before it.
@example(secret="0000000001234567", start=0, name="zlib-base64", before="0000", after="")
def test_any_window_of_a_known_secret_is_redacted(secret, start, name, before, after):
    norm = _normal(secret)
    # The piece of the secret that holds normalised characters start..start+16 (or the rest).
    kept = [i for i, ch in enumerate(secret) if _normal(ch)]
    first = kept[min(start, len(kept) - WINDOW)]
    piece = secret[first:]
    encoded = ENCODINGS[name](piece)
    with known(LEAKY_SERVICE_TOKEN=secret):
        out = scrub(before + encoded + after)
        again = scrub(out)
    assert again == out
    assert encoded not in out
    assert not leaked_windows(out, piece), (norm, out)


_PARTS = st.sampled_from([TOKEN, TOKEN[:9], TOKEN[9:], AWS_SECRET, KEY, KEY[4:], "\u200b", "\\u200b", " ", "\n",
                          "x", "=", "API_KEY=", "[", "]", REDACTED, "&#", "%2", "\\n", "sk-ant-", "H4sI",
                          base64.b64encode(TOKEN.encode()).decode(), KEY[4:].upper(), _fullwidth(KEY[8:30])])


@given(st.lists(_PARTS, max_size=10).map("".join))
@example("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY" + "Zq8vLm3x \u200bTr9w/Kp2+sNf7h!")
def test_scrub_is_idempotent_with_known_secrets_and_leaves_no_window(text):
    with known(DEPLOY_SERVICE_TOKEN=TOKEN, ANTHROPIC_API_KEY=KEY):
        once = scrub(text)
        assert scrub(once) == once
    assert not leaked_windows(once, TOKEN) and not leaked_windows(once, KEY)


def test_a_shaped_token_touching_a_redaction_is_redacted():
    # The random failure of issue 16: the AWS-shaped key glued to a known value was kept
    # next to the marker, and only a second scrub took it.
    with known(DEPLOY_SERVICE_TOKEN=TOKEN):
        out = scrub(AWS_SECRET + "Zq8vLm3x \u200bTr9w/Kp2+sNf7h!")
        assert AWS_SECRET not in out and "wJalrXUtn" not in out
        assert scrub(out) == out


def test_a_patch_holding_the_key_minus_four_characters_is_refused(tmp_path):
    from orchestrator.worktree.patchcheck import check_patch
    from orchestrator.worktree.policy import PatchPolicy

    for leaked in (KEY[4:], ENCODINGS["spaced"](KEY[13:40]), ENCODINGS["base32"](KEY[4:])):
        patch = ("--- /dev/null\n+++ b/settings.py\n@@ -0,0 +1,2 @@\n"
                 f"+NAME = 'service'\n+VALUE = {json.dumps(leaked)}\n")
        with known(ANTHROPIC_API_KEY=KEY):
            problems = PatchPolicy().violations(check_patch(patch), tmp_path)
        assert problems == ["the text added to settings.py holds a secret value (not shown)"], problems
