"""Mutant twins: copies of a project's own tests, each with one expected value changed, that must fail.

A patch can change how its tests are judged: code under test that replaces the runner's
assertions, how it runs a test or what it reports, so that the tests that exercise it pass
whatever it does. mesh's synthetic control tests (``orchestrator.sandbox.canaries``) catch a
forger that fakes every verdict, but they call none of the project's code, so a forger that
fakes only the verdicts of tests that use its module tells them apart.

A **twin** is a copy of one of the project's tests, planted in the tree copy next to its
original, in the same file, class or package, calling the same code through the same names,
whose last assertion compares against a changed expected value: when the original passes, its
twin must fail. A twin reported passed (or skipped, or not reported) while its original passed
means the runner's verdicts are forged. For each runner mesh reads, one module (listed in
``table.MUTATORS``) knows the language's tests: which files a command collects, which tests can
be twinned and how, and the arguments that make a command that names its tests run the twins
too. ``model`` holds what they share: the twins' names, which files to twin (those the command
names, then those that reach what the commit under test changed, then a sample) and how a run's
report is judged.

May import: ``orchestrator.testruns``.
"""
