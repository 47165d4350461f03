PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo install bench clean sandbox

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# Validation and command workers run inside bubblewrap: install it where it is missing and we
# may (root with apt-get), else say the one command to run.
sandbox:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; \
	  else \
	    echo "mesh needs bwrap (bubblewrap) to sandbox validation; run: sudo apt-get install bubblewrap"; \
	  fi; }

install: $(STAMP) sandbox

test: $(STAMP) sandbox
	$(BIN)/python -m pytest

demo: $(STAMP) sandbox
	$(BIN)/mesh demo

bench: $(STAMP)
	$(BIN)/python bench/tracker_scale.py
	$(BIN)/python bench/run_overhead.py
	$(BIN)/python bench/sandbox_cost.py

clean:
	rm -rf $(VENV) build *.egg-info
