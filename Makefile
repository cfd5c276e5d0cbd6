# The two commands of the README: `make run` (the main job) and `make test` (the tests).
# Both create .venv/ when it is missing: torch first (the CPU build on this machine's disk),
# then the project with its pinned dependencies and the `train` and `test` extras.
VENV := .venv
PY := $(VENV)/bin/python
# The wheel installs miles_topology only; the consumers in miles/ run from this checkout, so
# the launcher, its Ray workers and the tests' subprocesses find them through PYTHONPATH.
export PYTHONPATH := $(CURDIR)
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[train,test]'
	touch $(STAMP)

.PHONY: run test test-fast test-slow bench wheel docs
run: $(STAMP)
	$(PY) -m miles.train $(ARGS)

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

bench: $(STAMP)
	$(PY) bench/topology_scale.py
	$(PY) bench/r3_packing.py
	$(PY) bench/check_scripts.py
	$(PY) bench/pylaunch.py
	$(PY) bench/startup.py
	$(PY) bench/first_result.py
	$(PY) bench/plan.py
	$(PY) bench/bounds.py
	$(PY) bench/plan_measured.py

wheel: $(STAMP)
	$(PY) -m pip wheel --no-deps -q -w dist .

docs: $(STAMP)
	$(PY) tools/gen_codes.py > docs/problem-codes.md
