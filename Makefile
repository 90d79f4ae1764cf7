# The two commands of the README: `make run` and `make test`. Everything else is what they stand on.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Python's compiled modules (and pytest's rewritten tests) are cached in __pycache__ even where the environment asks
# for none: recompiling every module on every run costs the unit tier about 3 of its 30 seconds.
unexport PYTHONDONTWRITEBYTECODE
AZURITE := .tools/node_modules/.bin/azurite
AZURITE_VERSION := 3.37.0
# Azurite is patched after install (local_host/azurite-patches/README.md says why); the stamp names the patches.
AZURITE_PATCHES := $(wildcard local_host/azurite-patches/*.patch)
AZURITE_STAMP := .tools/.azurite-$(AZURITE_VERSION)-patched-13
PATCH_PACKAGE_VERSION := 8.0.1
# The official JavaScript client, which a test drives from a node script (tests/acceptance/js/).
TC_CLIENT_VERSION := 87.1.3
TC_CLIENT_STAMP := .tools/.taskcluster-client-$(TC_CLIENT_VERSION)
# Taskcluster's generic-worker and `taskcluster` CLI, which tests run unchanged: built from the Go module proxy
# (tests/taskcluster-go/go.mod names the release, go.sum pins the hashes). Without Go their tests are skipped.
# The inspector's JavaScript checks (ESLint, tsc --checkJs, node's test runner): shared/api/inspector/package-lock.json.
INSPECTOR_TOOLS_STAMP := shared/api/inspector/node_modules/.installed
# checkov: Bicep's security checks (tests/habits/test_deploy.py runs it), in an environment of its own, as its many
# pins are not the project's.
CHECKOV_VERSION := 3.3.30
CHECKOV := .tools/checkov-$(CHECKOV_VERSION)/bin/checkov
GO_TOOLS := .tools/go/bin
GO_TOOLS_STAMP := $(GO_TOOLS)/.built
TC_GO := github.com/taskcluster/taskcluster/v97

.PHONY: setup run test test-unit coverage test-fast lint typecheck check clean

setup: $(VENV)/.installed $(AZURITE_STAMP)

$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .  # the tc-queue-worker and tc-queue-admin commands
	@touch $@

$(AZURITE_STAMP): $(AZURITE_PATCHES)  # a stamp per version and patch set, so an older checkout is upgraded
	# Patched by an older patch set, maybe: reinstalled as npm ships them (their command links too, which npm makes
	# executable only when it makes them).
	rm -rf .tools/node_modules/azurite .tools/node_modules/lokijs .tools/node_modules/.bin/azurite*
	npm install --prefix .tools --no-audit --no-fund --loglevel=error azurite@$(AZURITE_VERSION) \
		patch-package@$(PATCH_PACKAGE_VERSION)
	cd .tools && node_modules/.bin/patch-package --error-on-fail --patch-dir ../local_host/azurite-patches
	@touch $@

$(TC_CLIENT_STAMP): $(AZURITE_STAMP)
	npm install --prefix .tools --no-audit --no-fund --loglevel=error --engine-strict=false \
		taskcluster-client@$(TC_CLIENT_VERSION)
	@touch $@

$(INSPECTOR_TOOLS_STAMP): shared/api/inspector/package.json shared/api/inspector/package-lock.json
	npm ci --prefix shared/api/inspector --no-audit --no-fund --loglevel=error
	@touch $@

$(CHECKOV):
	$(PYTHON) -m venv .tools/checkov-$(CHECKOV_VERSION)
	.tools/checkov-$(CHECKOV_VERSION)/bin/pip install --quiet --disable-pip-version-check checkov==$(CHECKOV_VERSION)

$(GO_TOOLS_STAMP): tests/taskcluster-go/go.mod tests/taskcluster-go/go.sum
	@if command -v go >/dev/null; then \
		mkdir -p $(GO_TOOLS) && cd tests/taskcluster-go && export GONOSUMDB=github.com/taskcluster GOFLAGS=-mod=readonly \
		&& go build -tags insecure -o ../../$(GO_TOOLS)/generic-worker $(TC_GO)/workers/generic-worker \
		&& go build -o ../../$(GO_TOOLS)/taskcluster $(TC_GO)/clients/client-shell && touch ../../$@; \
	else echo "go not found: generic-worker and the taskcluster CLI are not built, their tests are skipped"; fi

run: setup
	$(PY) -m local_host run $(if $(WORKER),--worker $(WORKER)) $(if $(SCALE),--scale $(SCALE))

# Tests run in TEST_WORKERS processes (pytest-xdist; 0: in pytest's own): each has its Azurite and hosts. Two
# halve the suite's time on a 2-core machine (docs/performance.md#the-test-suite); tests of a module stay together.
TEST_WORKERS ?= 2

test: setup $(TC_CLIENT_STAMP) $(GO_TOOLS_STAMP) $(INSPECTOR_TOOLS_STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope $(PYTEST_ARGS)

# The inner loop: the unit tier on the memory connector and the tests' clock; nothing but the virtualenv: no
# Azurite, Go or npm. The habit checks are `make lint`.
test-unit: $(VENV)/.installed
	$(PY) -m pytest -q -n $(TEST_WORKERS) -p no:schemathesis tests/unit $(PYTEST_ARGS)

# The same tier with branch coverage of shared/, which fails under its floor (pyproject.toml); CI runs it.
coverage: $(VENV)/.installed
	$(PY) -m pytest -q -n $(TEST_WORKERS) --cov --cov-report=term tests/unit $(PYTEST_ARGS)

# The unit tier and the quick integration tests (Azurite, no browser, no Go tools), about 2 minutes.
test-fast: setup $(INSPECTOR_TOOLS_STAMP)
	$(PY) -m pytest -q -n auto -m "not slow" tests/unit tests/integration $(PYTEST_ARGS)

# The habits: lint, format, layers, types, the inspector's ESLint and tsc, and the checks of docs and deploy files.
lint: setup $(INSPECTOR_TOOLS_STAMP) $(CHECKOV)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports
	$(PY) -m mypy shared functions local_host worker queue_admin tools function_app.py
	npm --prefix shared/api/inspector run --silent lint
	npm --prefix shared/api/inspector run --silent typecheck
	$(PY) -m pytest -q -p no:cacheprovider tests/habits

typecheck: setup
	$(PY) -m mypy shared functions local_host worker queue_admin tools function_app.py

check: lint typecheck test

clean:
	rm -rf $(VENV) .tools shared/api/inspector/node_modules .pytest_cache .mypy_cache .ruff_cache
