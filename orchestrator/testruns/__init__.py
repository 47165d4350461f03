"""Test results by name: what each test runner mesh recognises says of every test it ran.

An exit status says whether a command failed, not which tests ran, which failed, or why. For
every runner mesh recognises, one **reader** (a module of this package, listed in
``table.READERS``) knows how to ask the runner for a machine-readable account of its run (a
report file mesh names, or the runner's own plain output) and how to read it into a ``Run``:
one ``Case`` per test, with its id, status (passed, failed, errored, skipped), duration and,
for a failure, its own message (assertion, panic, expected/received), bounded and scrubbed.

A reader follows the small protocol of ``model.Reader``: ``recognises(argv, tree)``,
``instrument(argv, report, tree)`` (mesh's arguments, added after the allowlist admitted the
command), ``source`` (``"file"``: the report file; ``"stdout"``: the command's standard
output) and ``read(data)``. Adding a runner is one module and a row of the table.

Reports and output are written by the code under test, so they are hostile input: readers
parse them with size caps, no XML entities, bounded nesting, and never trust them to make a
failed command pass (``orchestrator.sandbox.testcounts`` decides that).

May import: ``redact``. Nothing of the rest of ``orchestrator``.
"""
