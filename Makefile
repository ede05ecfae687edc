# gpufleet: the local lab and the tests. `make lab` and `make test` install what they need.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
LAB_NODES ?= 2
# `make acceptance` tests these hosts of this inventory (the lab's nodes by default).
INVENTORY ?= inventories/lab
HOSTS ?= gpu_nodes
export GPUFLEET_NODE_IMAGE ?= gpufleet-node:trixie
export PATH := $(CURDIR)/$(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

.PHONY: help venv docker image training-image lab lab-up lab-down acceptance audit lint syntax unit integration docs collection sanity core-latest ee ee-image molecule test test-fast benchmark clean

help:  ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(VENV)/.installed: requirements.txt
	@command -v $(PYTHON) >/dev/null || { echo "python3 is required"; exit 1; }
	@$(PYTHON) -c 'import venv, ensurepip' 2>/dev/null || { \
	  echo "installing python3-venv"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	@touch $@

$(VENV)/.installed-test: $(VENV)/.installed requirements-test.txt
	$(BIN)/pip install -q -r requirements-test.txt
	@touch $@

venv: $(VENV)/.installed  ## Python tools (ansible, molecule, linters) in .venv

docker:  ## Make sure a Docker engine answers (installs docker.io, starts dockerd)
	@scripts/ensure-docker.sh

image: docker  ## Build the Debian 13 and Debian 12 node images (cached by recipe hash), start the shared apt cache, build the training image
	@scripts/build-node-image.sh trixie bookworm
	@scripts/ensure-apt-cache.sh
	@$(MAKE) --no-print-directory training-image

training-image: docker  ## Build the CPU training image (cached by recipe)
	@scripts/build-training-image.sh

lab: venv image  ## Start LAB_NODES node containers, run site.yml + validate on them over SSH, then the acceptance tests
	@$(BIN)/python scripts/lab.py up --nodes $(LAB_NODES)

acceptance: venv  ## Is each node done? testinfra over Ansible's connection: HOSTS of INVENTORY (default: the lab's nodes)
	$(BIN)/pytest -v -rs tests/acceptance --hosts=ansible://$(HOSTS) --ansible-inventory=$(INVENTORY)

audit: venv  ## Lynis hardening index and what is left, per lab node (after make lab)
	@$(BIN)/python scripts/lynis-audit.py

lab-down: venv  ## Remove every container, network, volume and key the lab made
	@$(BIN)/python scripts/lab.py down

lint: venv  ## yamllint + ansible-lint (production profile)
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint --profile production

syntax: venv  ## ansible-playbook --syntax-check of every playbook
	@scripts/syntax-check.sh

unit: $(VENV)/.installed-test  ## pytest unit tests (they fail when `make docs` has something to write)
	$(BIN)/pytest -q tests/unit

integration: $(VENV)/.installed-test  ## pytest tests that run ansible-playbook / ansible-runner on localhost
	$(BIN)/pytest -q tests/integration

docs: venv  ## Role README variable tables, defaults/main.yml comments and inventories/prod samples from meta/argument_specs.yml
	$(BIN)/python scripts/role_docs.py

collection: venv  ## Build the collection tarball, install it elsewhere and use it
	@scripts/collection-check.sh

sanity: venv  ## ansible-test sanity on a copy of the collection (skips listed in tests/sanity/ignore-<ansible-core X.Y>.txt)
	@scripts/sanity.sh

core-latest: docker  ## unit, integration, collection and sanity on the newest ansible-core (requirements-core-latest.txt) in a Debian 13 container
	@scripts/core-latest.sh

ee: $(VENV)/.installed-test  ## Build context of the execution environment for AWX/AAP in build/ee/context (docs/awx.md)
	@scripts/ee-context.sh

ee-image: $(VENV)/.installed-test image  ## Build the execution environment on a local Debian base and run a job in it
	@scripts/ee-image-check.sh

molecule: venv image  ## molecule test for every scenario (MOLECULE_JOBS in parallel)
	@$(BIN)/python scripts/run_molecule.py

test-fast: venv  ## Everything but molecule
	@$(BIN)/python scripts/run_tests.py lint syntax unit integration collection sanity

test: venv  ## Everything: lint, syntax, unit, integration, collection, sanity, execution environment image, the same on the newest ansible-core, molecule
	@scripts/ensure-docker.sh
	@$(BIN)/python scripts/run_tests.py lint syntax unit integration collection sanity ee core-latest molecule

# dev-sec's hardening collection that `make benchmark` runs beside site.yml: $GPUFLEET_PEER_DEVSEC, else a
# shared/peers/devsec-hardening folder beside the checkout when there is one; without it the comparison is skipped.
PEER ?= $(firstword $(GPUFLEET_PEER_DEVSEC) $(wildcard ../shared/peers/devsec-hardening))
# More options for scripts/benchmark.py, such as --sizes 1,2 or --pairs 3.
BENCHMARK_ARGS ?=

benchmark: venv image  ## No-op figures at 1, 2 and 4 lab nodes beside dev-sec's hardening (PEER=, BENCHMARK_ARGS=)
	@$(BIN)/python scripts/benchmark.py $(if $(PEER),--peer "$(PEER)") $(BENCHMARK_ARGS)

clean: lab-down  ## Remove the venv, caches, the shared apt cache and core-latest's sanity volume
	-docker rm -f gpufleet-apt-cache >/dev/null 2>&1
	-docker volume rm gpufleet-apt-cache >/dev/null 2>&1
	-docker volume ls -q | grep -E '^gpufleet-core-latest-sanity-' | xargs -r docker volume rm >/dev/null 2>&1
	rm -rf $(VENV) .cache
