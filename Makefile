# Two commands, each bootstrapping what it needs on a fresh clone:
#   make demo   - synthesize the example app, run it offline, print the summary and a timeline
#   make test   - the whole test suite (template, unit, local runtime on both DynamoDB backends)
# and, for CI: make test-compat - the template tests on the declared aws-cdk-lib and Python floors
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP_PY := $(VENV)/.installed
STAMP_NPM := node_modules/.installed
ARGS ?=
# jsii and the CDK CLI run on the Node LTS that npm installs here (the npm package "node"),
# whatever node the machine has: no end-of-life banner, the same Node everywhere.
NODE_BIN := $(CURDIR)/node_modules/.bin
export JSII_NODE := $(NODE_BIN)/node
export PATH := $(NODE_BIN):$(PATH)

# The compatibility floor: the declared aws-cdk-lib minimum (pyproject.toml) on the declared
# Python minimum, in a venv of its own; `make test-compat` runs the template tests there.
COMPAT_VENV := .venv-compat
CDK_FLOOR := $(shell sed -n 's/^ *"aws-cdk-lib>=\([0-9.]*\),.*/\1/p' pyproject.toml)
PYTHON_FLOOR := $(shell sed -n 's/^requires-python = ">=\([0-9.]*\)"/\1/p' pyproject.toml)
# python3.10 when the machine has it (on PATH, or pyenv's), else $(PYTHON).
COMPAT_PYTHON ?= $(firstword $(shell command -v python$(PYTHON_FLOOR) >/dev/null && python$(PYTHON_FLOOR) -c 'import sys; print(sys.executable)' 2>/dev/null) $(wildcard $(HOME)/.pyenv/versions/$(PYTHON_FLOOR).*/bin/python$(PYTHON_FLOOR)) $(PYTHON))
STAMP_COMPAT := $(COMPAT_VENV)/.installed-$(CDK_FLOOR)
COMPAT_TESTS := tests/constructs/test_locked_workflow_template.py tests/constructs/test_validation.py \
	tests/protocol/test_lock_variants_protocol.py tests/protocol/test_lock_variants_validation.py \
	tests/constructs/test_example_app.py tests/tools/test_readme.py

.PHONY: deps demo test test-compat test-runtime-range bench bench-runtime bench-variants bench-fair bench-fair-1000 bench-coalesce bench-shared bench-rate bench-flow bench-uncontended stress matrix synth templates-snapshot diagram clean

$(STAMP_PY): pyproject.toml .ci/constraints-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]" -c .ci/constraints-dev.txt
	touch $@

$(STAMP_NPM): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

deps: $(STAMP_PY) $(STAMP_NPM)

demo: deps
	$(PY) -m tools.demo $(ARGS)

# Six workers, one group of test files each at a time: a file, or the files split from one long
# file, whose tests share its deployed stack (tests/file_groups.py's GROUPS, handed out whole by its
# FileGroupScheduling; the group's stack is deployed once per backend, tests/kept_deployment.py).
# The suite waits on leases, graces and polls more than it computes - with four workers, `time`
# showed 93 % of CPU of 200 % in 23 min 40 s on 2 cores (a fresh clone, 2026-11-28); six keep both
# cores busier. Groups go out longest first (tests/file_groups.py's LONGEST_FIRST;
# --no-loadscope-reorder keeps that order).
TEST_WORKERS ?= 6

test: deps
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder $(ARGS)

$(STAMP_COMPAT): pyproject.toml
	rm -rf $(COMPAT_VENV)
	$(COMPAT_PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(COMPAT_VENV)/bin/python -m pip install --quiet -e ".[dev]" "aws-cdk-lib==$(CDK_FLOOR)" -c .ci/constraints-dev.txt
	touch $@

# The runtime's suite (tests/local) on the floor and the newest of the moto and jsonata-python
# ranges [local] accepts (.ci/runtime-range).
test-runtime-range:
	bash .ci/runtime-range

test-compat: $(STAMP_NPM) $(STAMP_COMPAT)
	$(COMPAT_VENV)/bin/python -c "import sys, importlib.metadata as m; \
		print('test-compat: Python', sys.version.split()[0], 'aws-cdk-lib', m.version('aws-cdk-lib')); \
		assert m.version('aws-cdk-lib') == '$(CDK_FLOOR)', 'the floor is not what is installed'"
	$(COMPAT_VENV)/bin/python -m pytest -p no:cacheprovider -q $(COMPAT_TESTS) $(ARGS)

bench: deps
	$(PY) -m tools.bench $(ARGS)

# The offline runtime's speed, this tree against a baseline commit, side by side in one run
# (each in its own process; the baseline in a temporary git worktree): the README quick-start
# test's steps, time per state entered, wake-up latency as the session grows to 1,000
# executions, DynamoDB latency in a burst; prints both and the ratio. ARGS="--baseline REV"
bench-runtime: deps
	$(PY) -m tools.bench_runtime $(ARGS)

bench-variants: deps
	$(PY) -m tools.bench_variants $(ARGS)

bench-fair: deps
	$(PY) -m tools.bench_fair $(ARGS)

# 1,000 fair waiters with AWS-sized tokens on one key (DynamoDB Local; ~30 min on 2 cores):
# FIFO grants, no overlap, fences in order, nothing left queued
bench-fair-1000: deps
	$(PY) -m tools.bench_fair --thousand $(ARGS)

# Flow control per key: a burst of 20 runs on one key under the polling, fair and coalescing
# (QueueLimit.keep_newest(1)) locks, side by side: work runs, transitions and dollars per event.
bench-coalesce: deps
	$(PY) -m tools.bench_coalesce $(ARGS)

bench-shared: deps
	$(PY) -m tools.bench_shared $(ARGS)

# The rate limit: a burst of 200 runs on one key at 10 per minute (about 20 minutes; a quick
# look: ARGS="--runs 30 --limit 5 --period 6").
bench-rate: deps
	$(PY) -m tools.bench_rate $(ARGS)

# What an uncontended run of each lock kind costs in state transitions (against the samples' 2),
# and what each extra state buys; exits 1 on a lock state with no reason given (ARGS="--backend dynamodb-local").
bench-uncontended: deps
	$(PY) -m tools.bench_uncontended $(ARGS)

# Flow control per key, both cases in one run: the coalescing burst (bench-coalesce's defaults)
# and the rate limit's (bench-rate's: 200 runs at 10 a minute, about 20 minutes).
bench-flow: deps
	$(PY) -m tools.bench_coalesce
	$(PY) -m tools.bench_rate

stress: deps
	$(PY) -m tools.stress $(ARGS)

# The fault matrix: every lock state of every kind (and every call of the clients and the
# janitor) x every fault, each cell a scenario judged by the invariants, on both backends;
# prints rows x faults (verdict, seconds) and writes out/matrix.md. A slice: ARGS="--slice 8 --seed 7";
# must fail: ARGS=--negative-control
matrix: deps
	$(PY) -m tools.matrix.run $(ARGS)

diagram: deps
	$(PY) -m locked_workflow.constructs_lib.diagram --readme docs/protocol.md

synth: deps
	npx cdk synth --quiet

# Every stack the tests and the example app build, as sorted JSON: before a refactoring
# `make templates-snapshot` (into build/templates), after it `make templates-snapshot
# ARGS=--check` proves each template byte-identical (tools/snapshot_templates.py).
TEMPLATES_DIR ?= build/templates
templates-snapshot: deps
	$(PY) -m tools.snapshot_templates $(if $(filter --check,$(ARGS)),--check $(TEMPLATES_DIR) $(filter-out --check,$(ARGS)),$(TEMPLATES_DIR) $(ARGS))

clean:
	rm -rf $(VENV) $(COMPAT_VENV) $(DOCS_VENV) .venv-runtime-floor .venv-runtime-newest node_modules cdk.out .pytest_cache site

# The documentation site (mkdocs.yml: the guides of docs/ and the API reference, which
# mkdocstrings reads from the sources without importing them) into site/. A venv of its own with
# the docs extra only (no CDK, moto or Node); --strict fails on a broken link or anchor, a page
# missing from the nav, a missing snippet, or a docstring it cannot read.
DOCS_VENV := .venv-docs
STAMP_DOCS := $(DOCS_VENV)/.installed
.PHONY: docs consumer-test

$(STAMP_DOCS): pyproject.toml
	test -x $(DOCS_VENV)/bin/python || $(PYTHON) -m venv $(DOCS_VENV)
	sed -n '/^docs = \[/,/^]/s/^ *"\([^"]*\)",*.*$$/\1/p' pyproject.toml > $(DOCS_VENV)/requirements.txt
	$(DOCS_VENV)/bin/python -m pip install --quiet -r $(DOCS_VENV)/requirements.txt
	touch $@

docs: $(STAMP_DOCS)
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict --site-dir site

# The package as a user gets it: the wheel in a fresh venv outside the repository, the README's
# quick start synthesized by the CDK CLI (aws-cdk@2) and its own offline test run there
# (.ci/consumer-test says what it checks; it needs neither .venv nor node_modules).
consumer-test:
	bash .ci/consumer-test
