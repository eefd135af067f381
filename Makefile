# The two commands a new user runs: `make demo` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
TORCH   := torch==2.13.0
# pip's default torch for the platform (on Linux, PyPI's is the CUDA build: gigabytes with its NVIDIA libraries);
# `make install TORCH_INDEX=https://download.pytorch.org/whl/cpu` installs the CPU-only wheel instead
TORCH_INDEX ?=
STAMP   := $(VENV)/.installed

.PHONY: demo test install bench clean

# What `make bench` times: every script in benchmarks/ but assemble_corpus.py (it writes the ablation corpus,
# it times nothing) and attention_speed.py (CUDA kernels only: run when this machine has a GPU).
BENCHMARKS := $(filter-out benchmarks/assemble_corpus.py benchmarks/attention_speed.py,\
                           $(sort $(wildcard benchmarks/*.py)))

# The venv is made when it has no pip: a `python3 -m venv` that failed (Debian/Ubuntu without python3-venv: no
# ensurepip) leaves .venv/bin/python behind, and a later run with a working Python must finish that venv, not fail
# on .venv/bin/pip forever. PY is checked first: pip on an older Python only finds no torch==... to install.
$(STAMP): pyproject.toml
	@test -x $(BIN)/pip || $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 10))' || \
	    { echo "make: albertlm needs Python 3.10 or newer to make $(VENV); PY=$(PY) is not one (give another: make install PY=python3.11)" >&2; exit 1; }
	test -x $(BIN)/pip || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX) )$(TORCH)
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m albertlm.demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

bench: $(STAMP)
	$(BIN)/pip install -q -e '.[bench]'
	for b in $(BENCHMARKS); do echo "== $$b"; $(BIN)/python $$b || exit 1; done
	if $(BIN)/python -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then \
	    echo "== benchmarks/attention_speed.py"; $(BIN)/python benchmarks/attention_speed.py; \
	else echo "== benchmarks/attention_speed.py skipped: it times CUDA kernels and torch sees no GPU here"; fi

clean:
	rm -rf $(VENV) build dist src/*.egg-info
