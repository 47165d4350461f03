PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# `make fuzz FUZZ_TESTS=tests/test_scrub_windows.py` fuzzes one file (default: every property test).
FUZZ_TESTS ?=

.PHONY: test fuzz demo install bench clean sandbox chromium beads-ui postgres claude-code agent-clis toolchains django eval-wheels

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# $(call need,CHECK,PACKAGES,WHO NEEDS THEM): when CHECK fails, install Debian's PACKAGES where
# we may (root with apt-get), else say the one command to run.
define need
	@$(1) >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2); \
	  else \
	    echo "$(3): install $(2) first; run: sudo apt-get install $(2)"; \
	  fi; }
endef

# $(call npm_tool,FOLDER,PACKAGE@RANGE,FILE IT PROVIDES,TEST THAT SKIPS WITHOUT IT)
define npm_tool
	@if command -v npm >/dev/null 2>&1 && [ ! -e $(1)/$(3) ]; then \
	  npm install --silent --no-audit --no-fund --prefix $(1) '$(2)' \
	    || echo "could not install $(2): $(4) will skip"; \
	fi
endef

# Validation and command workers run inside bubblewrap; pasta (Debian's passt) gives command
# workers a network namespace of their own (without it they share the host's, and say so).
sandbox:
	$(call need,command -v bwrap,bubblewrap,mesh's validation sandbox)
	$(call need,command -v pasta,passt,the command workers' own network)

# The PostgreSQL tracker's tests start a throwaway server with initdb + pg_ctl from Debian's
# postgresql package. `make test` requires it (MESH_REQUIRE_POSTGRES=1: those tests fail
# instead of skipping when no server can be started).
postgres:
	$(call need,ls /usr/lib/postgresql/*/bin/initdb,postgresql,the PostgreSQL tracker tests)

# The HTML report's browser tests (tests/test_report_html.py) render it in headless chromium
# (they skip, saying so, without it); mesh serve's pages are checked there with axe-core (npm,
# beside the venv; tests/test_web_phone.py skips that check without it).
chromium:
	$(call need,command -v chromium,chromium,the HTML report tests)
	$(call npm_tool,$(VENV)/axe-core,axe-core@>=4.10 <5,node_modules/axe-core/axe.min.js,tests/test_web_phone.py (axe-core))

# tests/test_bd_clients.py runs beads-ui (npm) against the bd shim; tests/test_presets_claude.py
# drives the real Claude Code CLI (its npm package ships the native binary) against the fake
# Messages API. Both are installed beside the venv; each test skips, saying so, without it.
BEADS_UI := $(VENV)/beads-ui
CLAUDE_CODE := $(VENV)/claude-code
beads-ui:
	$(call need,command -v npm,nodejs npm,the beads-ui test)
	$(call npm_tool,$(BEADS_UI),beads-ui@>=0.12 <0.13,node_modules/beads-ui/package.json,tests/test_bd_clients.py (beads-ui))

claude-code:
	$(call need,command -v npm,nodejs npm,the Claude Code preset test)
	$(call npm_tool,$(CLAUDE_CODE),@anthropic-ai/claude-code@>=2.1 <3,node_modules/.bin/claude,tests/test_presets_claude.py)

# tests/test_mcp_clients.py checks the `mesh mcp` set-up lines of docs/mcp.md with the real Codex
# and OpenCode CLIs (their npm packages ship the native binaries).
AGENT_CLIS := $(VENV)/agent-clis
agent-clis:
	$(call need,command -v npm,nodejs npm,the Codex and OpenCode set-up tests)
	$(call npm_tool,$(AGENT_CLIS),@openai/codex@>=0.169 <1,node_modules/.bin/codex,tests/test_mcp_clients.py (Codex))
	$(call npm_tool,$(AGENT_CLIS),opencode-ai@>=1.18 <2,node_modules/.bin/opencode,tests/test_mcp_clients.py (OpenCode))

# The toolchain tests (tests/test_toolchains*.py) validate real Node, Go and Rust projects: Go from
# Debian, cargo as found (rustup) or Debian's, and their dependencies from Debian's packaged sources
# (the Go and crates.io registries are out of reach here); pnpm and Yarn from npm, beside the venv.
NODE_TOOLS := $(VENV)/node-tools
toolchains:
	$(call need,command -v npm,nodejs npm,the Node toolchain tests)
	$(call need,command -v go,golang-go,the Go toolchain tests)
	$(call need,command -v cargo,cargo,the Rust toolchain tests)
	$(call need,ls -d /usr/share/gocode/src/github.com/google/go-cmp/cmp,golang-github-google-go-cmp-dev,the Go toolchain tests)
	$(call need,ls -d /usr/share/cargo/registry/itoa-1.* /usr/share/cargo/registry/memchr-2.*,librust-itoa-dev librust-memchr-dev,the Rust toolchain tests)
	$(call npm_tool,$(NODE_TOOLS),pnpm@>=9 <13,node_modules/.bin/pnpm,tests/test_toolchains.py (pnpm))
	$(call npm_tool,$(NODE_TOOLS),yarn@>=1.22 <2,node_modules/.bin/yarn,tests/test_toolchains.py (yarn))
	$(call npm_tool,$(VENV)/yarn-berry,@yarnpkg/cli-dist@>=4 <5,node_modules/.bin/yarn,tests/test_toolchains.py (Yarn Plug'n'Play))

# tests/test_django.py validates a real Django app (Django's runner and pytest-django); Django and
# pytest-django from PyPI, installed beside the venv (the app's .venv points at them).
DJANGO_SITE := $(VENV)/django-site
django: $(STAMP)
	@[ -e $(DJANGO_SITE)/pytest_django ] || $(BIN)/pip install --quiet --target $(DJANGO_SITE) 'django>=5.2,<6' 'pytest-django>=4.9,<5' \
	  || echo "could not install Django: tests/test_django.py will skip"

# tests/test_eval_environments.py builds SWE-bench-style environments offline: wheels of pytest 7
# and of a recent pytest (and what they need) from PyPI, kept beside the venv.
EVAL_WHEELS := $(VENV)/eval-wheels
# tests/test_swebench_agreement.py grades with SWE-bench's own functions: its wheel and unidiff's
# alone (its other dependencies, Docker's client, datasets, are not what grading uses).
SWEBENCH_WHEELS := $(VENV)/swebench-wheels
eval-wheels: $(STAMP)
	@[ -e $(EVAL_WHEELS)/.done ] || { $(BIN)/pip download --quiet --only-binary :all: -d $(EVAL_WHEELS) 'pytest>=7.4,<8' 2>/dev/null \
	  && $(BIN)/pip download --quiet --only-binary :all: -d $(EVAL_WHEELS) 'pytest>=8.4,<10' 2>/dev/null && touch $(EVAL_WHEELS)/.done; } \
	  || echo "could not download pytest wheels: tests/test_eval_environments.py will skip"
	@[ -e $(SWEBENCH_WHEELS)/.done ] || { $(BIN)/pip download --quiet --no-deps --only-binary :all: -d $(SWEBENCH_WHEELS) \
	  'swebench==5.0.2' 'unidiff>=0.7,<1' 2>/dev/null && touch $(SWEBENCH_WHEELS)/.done; } \
	  || echo "could not download SWE-bench's wheel: tests/test_swebench_agreement.py will skip"

install: $(STAMP) sandbox chromium beads-ui postgres claude-code agent-clis toolchains django eval-wheels

# The suite runs in TEST_WORKERS processes (pytest-xdist), each given whole files (a module's
# fixtures are made once); TEST_WORKERS=0 runs it in this one process. Three on two cores: with
# two, the suite's processes used 1.03 cores of 2 (2,805 s of tests in 23:55 of wall, 2026-12-06:
# its tests wait on git, bwrap, sandboxed test runs, servers and leases); three finished in
# 20:44 on the same machine with another job running beside them.
TEST_WORKERS ?= 3
test: $(STAMP) sandbox chromium beads-ui postgres claude-code agent-clis toolchains django eval-wheels
	MESH_REQUIRE_POSTGRES=1 MESH_REQUIRE_TOOLCHAINS=1 $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=25

# Long random runs of the property tests (Hypothesis's "fuzz" profile, tests/conftest.py);
# `make test` runs them derandomized. Pin every counterexample found as an @example.
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest -m hypothesis -p no:cacheprovider $(FUZZ_TESTS)

# mesh lives in the venv: the demo's last line says where, and how to call it as plain `mesh`.
demo: $(STAMP) sandbox
	$(BIN)/mesh demo
	@echo "mesh is $(abspath $(BIN))/mesh; to call it as mesh: source $(BIN)/activate (or export PATH=\"$(abspath $(BIN)):\$$PATH\")"

bench: $(STAMP)
	$(BIN)/python bench/tracker_scale.py
	$(BIN)/python bench/run_overhead.py
	$(BIN)/python bench/sandbox_cost.py
	$(BIN)/python bench/scrub_cost.py

clean:
	rm -rf $(VENV) build *.egg-info
