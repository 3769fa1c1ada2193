# The two commands a newcomer needs: `make run` and `make test`. Both build .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
FLASK := $(BIN)/flask --app app

.PHONY: run test test-quick test-browser hunt lint format bench bench-quick bench-cluster bench-streams soak cluster cluster-shards bench-shards clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.runtime: requirements.txt | $(BIN)/activate
	$(BIN)/pip install --quiet -r requirements.txt
	touch $@

## .dev: without pip's byte-compiling (--no-compile), which compiles every module of every package
## one after another (18.6 against 8.0 s of install here): the suites run Python with bytecode
## caches on (PYTEST below), so each module a test imports is compiled once, on first import, and
## the first one comes in the collection beside mypy; most of the packages' modules are never imported.
$(VENV)/.dev: requirements.txt requirements-dev.txt | $(BIN)/activate
	$(BIN)/pip install --quiet --no-compile -r requirements-dev.txt
	touch $@ $(VENV)/.runtime

## run: the app on its embedded SQLite database, seeded with demo orders on first start
run: $(VENV)/.runtime
	$(FLASK) init-db
	$(FLASK) seed --if-empty --rows $${SEED_ROWS:-300000}
	@if [ -z "$$API_TOKENS" ]; then echo "API_TOKENS is not set: POST and DELETE are open to clients on this machine (loopback) only; set API_TOKENS=token1,token2 to require Authorization: Bearer <token>."; fi
	$(FLASK) run --port $${PORT:-5000}

## test: lint, then the whole suite on SQLite, PostgreSQL 15 and 18.6, MariaDB and Chromium; modules in a
## random order (the seed is in the header: MODULE_ORDER=random:SEED replays it, MODULE_ORDER=file keeps
## the file order); the ten slowest tests at the end
MODULE_ORDER ?= random
## TEST_WORKERS: pytest-xdist processes (0: one process); each module runs whole on one worker, the
## Patroni modules one after another in their two lanes (tests/conftest.py, tests/cluster_support.py).
## Four on two cores: a quarter of a two-worker run was idle CPU (waits: failovers, a person's pace
## in the browser, slow clients), which two more workers fill (docs/testing.md, "Where the time goes").
TEST_WORKERS ?= 4
## QUICK_WORKERS: make test-quick's; its tests only compute, so two (one per core)
QUICK_WORKERS ?= 2
## PYTEST: the suites keep Python's bytecode caches (__pycache__, gitignored) even where the
## environment says not to (PYTHONDONTWRITEBYTECODE, set by some machines and container images):
## without them each pytest process rewrites and compiles the tests again (2.7 of a collection's
## 4.9 CPU s; five collections a run) and each app process compiles the app's modules.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest
## TYPES_AND_CACHES: mypy, and on the other core meanwhile one collection that writes those caches
## for the tests, so that the workers (which start together) read them rather than each compile
## the tests again; its errors, if any, are the run's own to report.
TYPES_AND_CACHES = $(PYTEST) --collect-only -q -p no:cacheprovider >/dev/null 2>&1 & collect=$$!; \
	$(BIN)/mypy; types=$$?; wait $$collect; exit $$types
test: $(VENV)/.dev
	scripts/ensure-browsers
	scripts/ensure-databases
	scripts/ensure-haproxy
	scripts/ensure-patroni
	scripts/ensure-shards
	scripts/ensure-prometheus
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(TYPES_AND_CACHES)
	$(PYTEST) --module-order=$(MODULE_ORDER) -n $(TEST_WORKERS) --durations=10 $(PYTEST_ARGS)

## test-quick: lint, types, and the tests that need no browser, database server or cluster (SQLite and
## unit tests, conftest's --quick): a developer's loop on every change, well under 90 s
test-quick: $(VENV)/.dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(TYPES_AND_CACHES)
	$(PYTEST) --quick -n $(QUICK_WORKERS) -q -p no:cacheprovider --durations=5 $(PYTEST_ARGS)

## test-browser: every browser test (tests/test_browser*.py); BASE_URL=http://host:port [API_TOKEN=...]
## runs them against a deployment, each either there or skipped with its reason in one line
## (-rsfE: the summary names each failure and error too, last, where a log's tail shows it).
## BROWSER_TEST_TIMEOUT bounds each test (seconds): a stall fails with its stack and trace.
## Against a deployment: Chromium alone (what differs between engines is the front's, tested in all
## three locally; the deployment's server is what is under test there), on DEPLOYMENT_WORKERS workers.
BROWSER_TEST_TIMEOUT ?= 180
## DEPLOYMENT_WORKERS: against a deployment, three pytest workers on two cores: its tests wait on
## the server and at a person's pace, which a third fills, and each test is a unit of its own
## (tests/conftest.py). A default make run: 216 s, against 300-306 with two workers and each
## browser module whole (docs/testing.md).
DEPLOYMENT_WORKERS ?= 3
DEPLOYMENT_ARGS = $(if $(BASE_URL),--browser chromium -n $(DEPLOYMENT_WORKERS))
test-browser: $(VENV)/.dev
	scripts/ensure-browsers
	@if [ -z "$$BASE_URL" ]; then scripts/ensure-databases; fi
	$(PYTEST) tests/test_browser*.py -rsfE --timeout $(BROWSER_TEST_TIMEOUT) $(DEPLOYMENT_ARGS) \
		--tracing retain-on-failure --screenshot only-on-failure --output test-results $(PYTEST_ARGS)

## hunt: the Hypothesis tests (those importing tests/hunt.py) with HUNT times their examples (10
## unless given), drawn anew each run: what the suite's fixed budgets never reach. Not part of
## `make test`; a failure prints the seed that replays it (--hypothesis-seed=N)
HUNT ?= 10
hunt: $(VENV)/.dev
	scripts/ensure-databases
	scripts/ensure-shards
	HUNT=$(HUNT) $(PYTEST) $$(grep -l "^from .hunt import" tests/test_*.py) -n $(QUICK_WORKERS) -q \
		-p no:cacheprovider $(PYTEST_ARGS)

lint: $(VENV)/.dev
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/mypy

format: $(VENV)/.dev
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

## bench: the full benchmark (three engines, 300k rows, PostgreSQL also 3M); writes bench/results/ and the README numbers
bench: $(VENV)/.dev
	scripts/ensure-databases
	scripts/ensure-wrk
	$(BIN)/python -m bench.run

## bench-quick: the same measurements on small tables in about a minute, into bench/results/quick/ (untracked)
bench-quick: $(VENV)/.dev
	scripts/ensure-databases
	scripts/ensure-wrk
	$(BIN)/python -m bench.run --quick

## soak: a minute of writers and readers against the app under gunicorn on PostgreSQL
soak: $(VENV)/.dev
	scripts/ensure-databases
	$(BIN)/python -m soak.run --seconds $${SECONDS_TO_SOAK:-60}

## cluster: etcd + 3 PostgreSQL nodes under Patroni (synchronous mode), 2 app servers, haproxy, Prometheus with the shipped alerts; Ctrl-C stops it all
cluster: $(VENV)/.dev
	scripts/ensure-haproxy
	scripts/ensure-patroni
	scripts/ensure-prometheus
	$(BIN)/python -m devtools.cluster --rows $${ROWS:-300000}

## bench-cluster: pages/s through haproxy with 1 and 2 app servers, replicas vs primary, routing cost
bench-cluster: $(VENV)/.dev
	scripts/ensure-haproxy
	scripts/ensure-patroni
	$(BIN)/python -m bench.cluster_level

## bench-streams: what 500 open live streams of new orders cost on each engine (docs/scroll.md)
bench-streams: $(VENV)/.dev
	scripts/ensure-databases
	$(BIN)/python -m bench.stream_cost

## cluster-shards: a coordinator and SHARDS=3 shards (postgres_fdw), each a Patroni cluster of NODES=2 (NODES=1: one server), 2 app servers, haproxy, Prometheus; Ctrl-C stops it all
cluster-shards: $(VENV)/.dev
	scripts/ensure-haproxy
	scripts/ensure-shards
	scripts/ensure-prometheus
	if [ "$${NODES:-2}" -gt 1 ]; then scripts/ensure-patroni; fi
	$(BIN)/python -m devtools.shards --shards $${SHARDS:-3} --nodes $${NODES:-2} --rows $${ROWS:-300000}

## bench-shards: a page through the coordinator at depth 0/50%/90% of 300k rows with 1, 2 and 4 shards, against OFFSET (a few minutes)
bench-shards: $(VENV)/.dev
	scripts/ensure-shards
	$(BIN)/python -m bench.shard_level

clean:
	rm -rf $(VENV) instance .pytest_cache .hypothesis
