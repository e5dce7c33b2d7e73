# Feeding the GPU: every workflow of the course. `make help` lists the targets.
# Everything is built from nothing: the virtual environment, the packages and the data.

PYTHON      ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.installed
TEST_STAMP  := $(VENV)/.installed-test
LFW         ?= synthetic
DATA_HOME   := data
SYNTHETIC   := $(DATA_HOME)/lfw-synthetic/.complete
REAL        := $(DATA_HOME)/lfw-real/.complete
AXE_VERSION := 4.14.1
AXE         := build/node_modules/axe-core/axe.min.js
SUBMISSIONS ?= submitted
JOBS        ?= 1
SCHEDULER   ?=
NB          ?=
WORK        ?= work
PYTEST_ARGS ?=
LAB_ARGS    ?=
STORE_ARGS  ?=
SITE_ARGS   ?=
LOOP        ?=
STEP        ?=
RECORD_ARGS ?=

.PHONY: help lab venv data objectstore release grade check test test-quick bench record site clean clean-data distclean

# List the targets.
help:
	@awk '/^# /{doc=substr($$0,3)} /^[a-z-]+:/{sub(/:.*/,"",$$1); if (doc) printf "  make %-12s %s\n", $$1, doc; doc=""}' Makefile

# JupyterLab serves any user, root included (containers, WSL, cloud machines), on localhost
# with a token; more options go in LAB_ARGS, e.g. make lab LAB_ARGS="--port=8899".
# Your working copy is work/ (ignored by git): made from the release on first use, never
# overwritten; a notebook the course changed since comes beside yours as NAME.updated.ipynb.
# Open the course in JupyterLab on your working copy work/ (makes the environment, the data and work/ first if missing).
lab: $(STAMP) $(if $(filter real,$(LFW)),$(REAL),$(SYNTHETIC))
	@$(PY) -m feedgpu.workflows.course.workcopy --work $(WORK)
	@echo "Opening JupyterLab on $(WORK)/ - open the URL printed below (Ctrl-C twice to stop)."
	@echo "Check a notebook with: make check NB=03. Course map: README.md. After the course: .venv/bin/feedgpu-diagnose (README)."
	$(VENV)/bin/jupyter lab --notebook-dir=$(WORK) --ServerApp.open_browser=False --ServerApp.allow_root=True $(LAB_ARGS)

# Create the virtual environment in .venv with the pinned packages and the course code (editable).
venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@# the Python first, in one line: the pinned PyTorch wheels are for 3.11
	@test -x $(PY) || $(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null || { \
	  found=$$($(PYTHON) -c 'import platform; print("Python", platform.python_version())' 2>/dev/null || echo "not found"); \
	  echo "make: the course needs Python 3.11 and '$(PYTHON)' is $$found: install 3.11 and name it, e.g. make lab PYTHON=python3.11"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -r requirements.txt
	@# jupyter-events asks for jsonschema's non-GPL format checkers, among them rfc3987-syntax,
	@# which builds its IRI grammar's parsers when jsonschema is imported: 1.4 to 2.6 s more for
	@# every process that imports nbformat (each nbgrader run, so each graded submission, and
	@# JupyterLab). Nothing the course runs validates an IRI format, and jsonschema leaves those
	@# formats unchecked without it (python-jsonschema/jsonschema#1428); `pip check` still passes.
	$(PY) -m pip uninstall --quiet --yes rfc3987-syntax
	@# pip byte-compiles 17,000 files on one core (a minute); compileall uses every core, and leaves
	@# out the packages' own test suites (a fifth of the files), which nothing here imports. Like
	@# pip, it skips the few files that are not Python 3 (test data inside packages): errors are not
	@# fatal. (Where PYTHONDONTWRITEBYTECODE is set, nothing else would ever compile them.)
	$(PY) -m compileall -q -j 0 -x '/tests/' $(VENV)/lib > /dev/null || true
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

# Prepare the LFW tree: LFW=synthetic (default, offline, < 1 min) or LFW=real (downloads ~230 MB).
data: $(if $(filter real,$(LFW)),$(REAL),$(SYNTHETIC))

$(SYNTHETIC): | $(STAMP)
	$(PY) lfw_dataset.py -prepare synthetic

$(REAL): | $(STAMP)
	$(PY) lfw_dataset.py -prepare real

# Serve the LFW tree from a local S3 object store until Ctrl-C (e.g. STORE_ARGS="--latency-ms 50").
objectstore: $(STAMP) $(if $(filter real,$(LFW)),$(REAL),$(SYNTHETIC))
	$(PY) -m feedgpu.objectstore --root $(DATA_HOME)/lfw-$(LFW) $(STORE_ARGS)

# Regenerate the student release notebooks/ from solutions/ with nbgrader.
release: $(STAMP)
	$(VENV)/bin/feedgpu-release

# Grade every SUBMISSIONS/<student>/<assignment>/ not graded yet, on JOBS local workers or the Dask cluster at SCHEDULER.
grade: $(STAMP) $(SYNTHETIC)
	$(VENV)/bin/feedgpu-grade $(SUBMISSIONS) --jobs $(JOBS) $(if $(SCHEDULER),--scheduler $(SCHEDULER))

# Check your own notebook in work/ with the instructor's tests, hidden ones too: make check NB=03 (all when NB is empty).
check: $(STAMP) $(SYNTHETIC)
	@$(PY) -m feedgpu.workflows.course.workcopy --work $(WORK) > /dev/null
	$(VENV)/bin/feedgpu-check --notebooks $(WORK) $(NB)

# Run the whole test suite (modules, notebooks, nbgrader pipeline, the site's accessibility).
test: $(TEST_STAMP) $(SYNTHETIC) $(AXE)
	$(PY) -m pytest $(PYTEST_ARGS)

# The packages only the tests need (requirements-test.txt: Lightning, for feedgpu-diagnose run).
$(TEST_STAMP): $(STAMP) requirements-test.txt
	$(PY) -m pip install --quiet --no-deps -r requirements-test.txt
	touch $@

# axe-core, the accessibility rules the tests run on the site's pages in Chromium (npm registry;
# without npm the check is skipped and says so).
$(AXE):
	@if command -v npm > /dev/null; then \
	  npm install --silent --no-audit --no-fund --prefix build axe-core@$(AXE_VERSION); \
	else echo "npm not found: the site's accessibility check will be skipped (install Node.js and npm)"; fi

# Run the quick tests only (skips notebooks and nbgrader).
test-quick: $(STAMP) $(SYNTHETIC)
	$(PY) -m pytest -m "unit and not slow" $(PYTEST_ARGS)

# Measure the course's figures; prints a table and writes build/bench.json.
bench: $(STAMP) $(SYNTHETIC)
	$(VENV)/bin/feedgpu-bench --output build/bench.json

# Record this machine's readings/<gpu>-<date>/ (a CUDA GPU; your loop too: make record LOOP=mytraining:make_loader STEP=mytraining:train_step).
record: $(STAMP) $(SYNTHETIC)
	$(VENV)/bin/feedgpu-record $(if $(LOOP),--loader $(LOOP) --step $(STEP)) $(RECORD_ARGS)

# Build the reference run as a static site in build/site/ (every solution executed here, answers blanked).
site: $(STAMP) $(SYNTHETIC)
	$(VENV)/bin/feedgpu-site $(SITE_ARGS)

# Remove build outputs, grading folders and caches (keeps .venv and data/).
clean:
	rm -rf build grading gradebook.db .pytest_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +

# Remove the prepared data sets.
clean-data:
	rm -rf $(DATA_HOME)/lfw-synthetic $(DATA_HOME)/lfw-real $(DATA_HOME)/.lfw-*

# Remove everything made: build outputs, data and the virtual environment.
distclean: clean clean-data
	rm -rf $(VENV) *.egg-info
