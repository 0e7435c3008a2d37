# Two commands, each bootstrapping what it needs on a fresh clone:
#   make demo   - synthesize the example app, run it offline, print the summary and a timeline
#   make test   - the whole test suite (template, unit, local runtime on both DynamoDB backends)
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

.PHONY: deps demo test bench bench-variants bench-fair stress synth diagram clean

$(STAMP_PY): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

$(STAMP_NPM): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

deps: $(STAMP_PY) $(STAMP_NPM)

demo: deps
	$(PY) -m constructs_lib.local.demo $(ARGS)

test: deps
	$(PY) -m pytest $(ARGS)

bench: deps
	$(PY) -m constructs_lib.local.bench $(ARGS)

bench-variants: deps
	$(PY) -m constructs_lib.local.bench_variants $(ARGS)

bench-fair: deps
	$(PY) -m constructs_lib.local.bench_fair $(ARGS)

stress: deps
	$(PY) -m constructs_lib.local.stress $(ARGS)

diagram: deps
	$(PY) -m constructs_lib.diagram --readme README.md

synth: deps
	npx cdk synth --quiet

clean:
	rm -rf $(VENV) node_modules cdk.out .pytest_cache
