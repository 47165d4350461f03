"""Forges: where people review mesh's work as pull requests (GitHub) or merge requests (GitLab).

One module per forge (``github``, ``gitlab``) behind the small protocol of ``model.Forge`` and
the table ``table.FORGES``, as toolchains and test readers are: finding the open pull request of
a branch, opening one, updating its title and body. ``api`` is the HTTP client they share (httpx,
the client the Anthropic SDK already brings): the token goes in one header of requests to the
configured API only, never in a URL, a log line or an error; redirects are not followed; an
``http://`` API URL is refused unless it is loopback. ``text`` makes model text safe in a body:
no mention pings anyone, no reference closes an issue. ``settings`` is the ``[forge]`` table.

May import: ``redact``. Nothing of the rest of ``orchestrator``.
"""
