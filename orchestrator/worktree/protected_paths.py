"""The paths a model-written patch may not touch by default: one table, with who loads each
path and why that makes it dangerous.

``orchestrator.worktree.policy`` refuses every pattern here (``DEFAULT_PROTECTED``) with block reason
``policy_violation`` unless ``patch.allow`` admits it; docs/security.md prints the same table
(``markdown_table``; a test fails when the two differ, ``python -m orchestrator.worktree.protected_paths``
prints it). Patterns follow the policy's globs: one without ``/`` names a file or folder at
any depth, one with ``/`` is anchored at the repository root (``**/`` for any depth), a
folder covers everything below it, and case never matters.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Protected", "PROTECTED_PATHS", "DEFAULT_PROTECTED", "markdown_table"]


class Protected(NamedTuple):
    """One row: the patterns, the tools that load what they name, and why a patch may not."""

    patterns: tuple[str, ...]
    loaded_by: str
    why: str


_CI = "runs commands in CI, with CI's secrets"
_AGENT = "instructions (and settings, hooks, MCP servers) an agent obeys on a developer's machine"

PROTECTED_PATHS: tuple[Protected, ...] = (
    # version control and its hook managers
    Protected((".gitmodules", ".gitattributes", ".gitconfig", ".lfsconfig"), "git, git LFS",
              "submodule URLs, filter and diff drivers: what git fetches and runs"),
    Protected((".githooks", ".git-hooks"), "git (core.hooksPath)", "hook scripts run on commit, checkout and push"),
    Protected((".hg", ".hgrc", ".svn", ".bzr", ".jj"), "Mercurial, Subversion, Bazaar, Jujutsu",
              "another VCS's metadata and config: hooks and aliases run commands"),
    Protected((".husky", ".pre-commit-config.yaml", ".pre-commit-config.yml", ".pre-commit-hooks.yaml",
               "lefthook.yml", "lefthook.yaml", ".lefthook.yml", ".lefthook.yaml", "lefthook-local.yml", ".lefthook",
               ".overcommit.yml"), "husky, pre-commit, lefthook, overcommit", "commands run on every commit"),
    # CI systems
    Protected((".github",), "GitHub Actions, Dependabot, Copilot", f"workflows: {_CI}"),
    Protected((".gitlab", ".gitlab-ci.yml", ".gitlab-ci.yaml"), "GitLab CI", _CI),
    Protected((".circleci", ".ci", "Jenkinsfile", "Jenkinsfile.*", "*.jenkinsfile", ".travis.yml", ".travis.yaml",
               "azure-pipelines.yml", "azure-pipelines.yaml", ".azure-pipelines", ".azuredevops", ".buildkite",
               "bitbucket-pipelines.yml", "bitbucket-pipelines.yaml", ".drone.yml", ".drone.yaml", ".drone.star",
               "appveyor.yml", ".appveyor.yml", ".woodpecker", ".woodpecker.yml", ".woodpecker.yaml", ".cirrus.yml",
               ".cirrus.yaml", ".cirrus.star", "cloudbuild.yml", "cloudbuild.yaml", "buildspec.yml", "buildspec.yaml",
               ".semaphore", "codefresh.yml", ".teamcity", "bamboo-specs", ".tekton", ".forgejo", ".gitea",
               ".builds", ".zuul.yaml", ".zuul.yml", "zuul.yaml", "zuul.d", ".zuul.d", ".harness", "wercker.yml",
               ".taskcluster.yml", ".taskcluster.yaml", "bitrise.yml", "bitrise.yaml", "codemagic.yaml", "codemagic.yml",
               ".screwdriver.yaml", "screwdriver.yaml", ".build.yml", ".build.yaml"),
              "CircleCI, Jenkins, Travis, Azure Pipelines, Buildkite, Bitbucket, Drone, AppVeyor, Woodpecker, "
              "Cirrus, Cloud Build, CodeBuild, Semaphore, Codefresh, TeamCity, Bamboo, Tekton, Forgejo, Gitea, "
              "sourcehut, Zuul, Harness, Wercker, Taskcluster, Bitrise, Codemagic, Screwdriver", _CI),
    Protected(("renovate.json", "renovate.json5", ".renovaterc", ".renovaterc.json", ".renovaterc.json5"), "Renovate",
              "automerge and post-upgrade tasks: what merges without a person, and commands run on upgrade"),
    # deploy services and tools that run commands from the project on ordinary use
    Protected((".readthedocs.yaml", ".readthedocs.yml"), "Read the Docs",
              "build commands run on every docs build, with the project's variables"),
    Protected(("netlify.toml",), "Netlify", "build command and plugins run on deploy, with deploy secrets"),
    Protected(("vercel.json",), "Vercel", "install and build commands run on deploy"),
    Protected(("app.json",), "Heroku (review apps, buttons)", "postdeploy and release scripts run on deploy"),
    Protected((".npmrc", ".yarnrc", ".yarnrc.yml", ".pnpmfile.*", "pnpmfile.js", "pnpmfile.cjs", "**/.yarn/plugins",
               "**/.yarn/releases"), "npm, Yarn, pnpm",
              "script-shell, node-options, yarnPath, Yarn plugins and pnpm hooks run code on every install or script"),
    Protected(("bunfig.toml",), "Bun", "preload scripts and a registry run or fetched on every bun command"),
    Protected(("pnpm-workspace.yaml", "package.yaml", "package.json5", "binding.gyp"), "pnpm, node-gyp (npm's install)",
              "pnpm's settings (pnpmfile, which dependencies may run build scripts) and manifests in formats the"
              " policy does not read; gyp actions run commands on every install"),
    # deploy services: commands run on deploy, with the deploy's secrets
    Protected(("Procfile", "fly.toml", "render.yaml", "railway.toml", "railway.json", "nixpacks.toml", "nixpacks.json",
               "heroku.yml", "amplify.yml", "appspec.yml", "appspec.yaml", "firebase.json", "wrangler.toml",
               "wrangler.json", "wrangler.jsonc", ".platform.app.yaml", ".platform", ".upsun", ".ebextensions", ".do"),
              "Heroku, Fly.io, Render, Railway, Nixpacks, AWS Amplify, CodeDeploy, Elastic Beanstalk, Firebase, "
              "Cloudflare, Platform.sh, Upsun, DigitalOcean",
              "release, build and pre-deploy commands run on deploy, with the deploy's secrets"),
    # Nix and the environments built on it
    Protected(("flake.nix", "flake.lock", "shell.nix", "default.nix", "devbox.json", "devbox.lock", "devenv.nix",
               "devenv.yaml", "devenv.lock"), "Nix (nix develop, nix-shell, direnv's use flake), devbox, devenv",
              "shellHook, init_hook and enterShell run when a shell enters the project; the locks pin what they fetch"),
    # Python tools that import what their own configuration files name, and where packages come from
    Protected((".pylintrc", "pylintrc", ".pylintrc.toml", "pylintrc.toml", ".flake8", "mypy.ini", ".mypy.ini",
               ".coveragerc"), "pylint, flake8, mypy, coverage.py",
              "init-hook (Python run on every lint), load-plugins, local plugins, plugins: code run on every lint,"
              " type check or coverage run"),
    Protected(("nuget.config",), "NuGet, dotnet", "package sources and the credentials sent to them: what restore"
              " downloads and runs"),
    Protected(("go.work", "go.work.sum"), "the go command", "which module directories replace the dependencies (code"
              " every build and test compiles), the toolchain it downloads and runs"),
    Protected(("pip.conf", "pip.ini", "uv.toml", "poetry.toml", "pdm.toml", ".pdm-python", ".condarc"),
              "pip, uv, Poetry, PDM, conda", "index URLs, package sources and the interpreter used: what gets"
              " installed and which Python runs"),
    # build tools whose project files choose the tool's binary, JVM options or start-up code
    Protected((".bazelrc", ".bazelversion", ".bazeliskrc", "**/tools/bazel"), "Bazel, Bazelisk",
              "startup options, the Bazel binary Bazelisk fetches, and a wrapper script it runs instead of Bazel"),
    Protected((".mvn", "**/gradle/wrapper", "init.gradle", "init.gradle.kts", "*.init.gradle", "*.init.gradle.kts"),
              "Maven, Gradle", "JVM options, extensions and the wrapper's download URL: code run on every build"),
    Protected((".sbtopts", ".jvmopts"), "sbt", "JVM options (a -javaagent) of every sbt command"),
    Protected(("rust-toolchain", "rust-toolchain.toml"), "rustup",
              "which toolchain runs, a folder of the tree included (path = ...)"),
    # interpreters and debuggers that run a start file found in the folder
    Protected((".pdbrc", ".irbrc", ".pryrc", ".gdbinit", ".lldbinit", ".Rprofile"), "pdb, irb, Pry, gdb, LLDB, R",
              "commands run whenever the interpreter or debugger starts in the folder"),
    Protected((".cargo",), "Cargo (in the folder and every one below)",
              "runner, rustc wrapper and aliases run on every build"),
    Protected(("mise.toml", ".mise.toml", "mise.local.toml", ".mise.local.toml", ".mise", "**/mise/config.toml",
               "**/.config/mise.toml", "**/.config/mise"), "mise",
              "env sourcing, hooks and tasks run when a shell enters the folder"),
    # environments and editors that run code when a folder is opened or entered
    Protected((".envrc",), "direnv", "shell code run when a shell enters the folder"),
    Protected((".env*", ".flaskenv"), "docker compose, dotenv loaders, Flask, aider",
              "sets PATH, LD_PRELOAD, NODE_OPTIONS... of what reads it"),
    Protected((".vscode", ".idea", ".devcontainer", ".devcontainer.json", ".gitpod.yml", ".idx", ".replit", "*.code-workspace",
               "replit.nix", ".exrc", ".nvimrc", ".nvim.lua"),
              "VS Code, JetBrains IDEs, Dev Containers, Gitpod, Firebase Studio, Replit, Vim, Neovim",
              "tasks, launch settings, start-up commands and editor scripts"),
    Protected((".zed", ".rules"), "Zed", f"tasks, language servers; {_AGENT}"),
    # agent CLIs mesh drives (presets): the next worker call would load them
    Protected((".claude", "CLAUDE.md", "CLAUDE.local.md", ".mcp.json"), "Claude Code (the claude preset)", _AGENT),
    Protected((".codex", "AGENTS.md", "AGENTS.override.md"), "Codex (the codex preset), and most agents", _AGENT),
    Protected((".opencode", "opencode.json", "opencode.jsonc"), "opencode (the opencode preset)",
              f"plugins (code it runs); {_AGENT}"),
    # other agent tools on a developer's machine
    Protected(("GEMINI.md", ".gemini"), "Gemini CLI", _AGENT),
    Protected(("QWEN.md", ".qwen"), "Qwen Code", _AGENT),
    Protected((".cursor", ".cursorrules"), "Cursor", _AGENT),
    Protected((".windsurf", ".windsurfrules"), "Windsurf", _AGENT),
    Protected((".clinerules",), "Cline", _AGENT),
    Protected((".roo", ".roomodes"), "Roo Code", _AGENT),
    Protected((".kiro",), "Kiro", f"hooks run on file events; {_AGENT}"),
    Protected((".amazonq",), "Amazon Q Developer", _AGENT),
    Protected(("crush.json", ".crush.json"), "Crush", f"language servers it starts; {_AGENT}"),
    Protected((".continue",), "Continue", _AGENT),
    Protected((".goosehints",), "Goose", _AGENT),
    Protected((".aider.conf.yml", ".aider.model.settings.yml", ".aider.model.metadata.json"), "aider",
              "lint and test commands it runs, the models and endpoints it sends the code to"),
    Protected((".openhands", ".openhands_instructions"), "OpenHands", f"setup.sh (run in every session); {_AGENT}"),
    Protected((".kilocode", ".kilocodemodes", ".kilocoderules"), "Kilo Code", _AGENT),
    Protected((".junie", ".aiassistant"), "Junie, JetBrains AI Assistant", _AGENT),
    Protected(("AGENT.md", ".agent", ".agents", ".amp"), "Amp, and agents reading the AGENT(S) convention", _AGENT),
    Protected(("CRUSH.md", ".crush"), "Crush", _AGENT),
    Protected(("WARP.md", ".warp"), "Warp", _AGENT),
    Protected((".augment", ".augment-guidelines"), "Augment Code", _AGENT),
    Protected((".trae",), "Trae", _AGENT),
    Protected((".factory",), "Factory (droid)", f"hooks; {_AGENT}"),
    Protected(("IFLOW.md", ".iflow"), "iFlow CLI", _AGENT),
    Protected((".tabnine", ".continuerules", ".continuerc.json", ".roorules", ".voidrules", ".zencoder", ".qodo",
               "replit.md"), "Tabnine, Continue, Roo Code, Void, Zencoder, Qodo, Replit Agent", _AGENT),
    Protected((".github/copilot-instructions.md",), "GitHub Copilot", _AGENT),
    # Python start-up hooks
    Protected(("sitecustomize.py", "usercustomize.py", "*.pth"), "Python (site)", "code run at every interpreter start"),
    # installed dependencies: validation shows the checkout's own, read-only (orchestrator.toolchains)
    Protected(("node_modules", ".pnp.cjs", ".pnp.loader.mjs", ".pnp.data.json", "**/.yarn/cache", "**/.yarn/unplugged",
               "**/.yarn/install-state.gz"), "Node, npm, pnpm, Yarn Plug'n'Play",
              "installed packages: code every test and script imports, never the patch's to write"),
    # review routing
    Protected(("CODEOWNERS",), "GitHub, GitLab", "decides who must approve a change"),
    # test-runner configuration that can silence tests
    Protected(("conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml"),
              "pytest", "can skip or silence tests (conftest.py runs code at collection)"),
    Protected(("jest.config.*", "vitest.config.*", "vitest.workspace.*", "vitest.projects.*", ".mocharc*", "ava.config.*",
               "karma.conf.*", ".c8rc*", ".nycrc*", ".taprc", "babel.config.*", ".babelrc*", "eslint.config.*",
               ".eslintrc*"),
              "Jest, Vitest, Mocha, AVA, Karma, c8, nyc, tap, Babel, ESLint",
              "which tests run, setup files and reporters loaded into every test run, transforms and plugins: code"
              " run on every test, build or lint, and what can silence tests"),
    Protected(("tox.ini", "setup.cfg"), "tox, pytest, flake8, mypy, coverage.py, pylint, setuptools",
              "test-runner settings that can silence tests; [flake8:local-plugins], [mypy] and [coverage:run]"
              " plugins, pylint's init-hook, setuptools' commands: code those tools run"),
)

DEFAULT_PROTECTED: tuple[str, ...] = tuple(pattern for row in PROTECTED_PATHS for pattern in row.patterns)


def markdown_table() -> str:
    """``PROTECTED_PATHS`` as the Markdown table docs/security.md prints."""
    lines = ["| paths | loaded by | why a patch may not touch them |", "|---|---|---|"]
    for row in PROTECTED_PATHS:
        lines.append(f"| {', '.join(f'`{p}`' for p in row.patterns)} | {row.loaded_by} | {row.why} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
