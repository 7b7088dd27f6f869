# The two commands a fresh machine needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip

.PHONY: run spark-deps test lint unit e2e spark bench bench-rabbitmq bench-quick soak fuzz clean browser compiler clients etcd cluster

# the install builds the C modules in place (persistence/_mirror_frame.c, server/amqp/_wire.c), so a
# change to one installs again
C_SOURCES := persistence/_mirror_frame.c server/amqp/_wire.c
$(VENV)/.core: pyproject.toml $(C_SOURCES)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	touch $@

$(VENV)/.dev: pyproject.toml $(C_SOURCES) | compiler
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev,spark]'
	touch $(VENV)/.core $@

# pyspark + pyarrow (and pika) into the venv `make run` made, for `headrace export/replay` and
# `spark.read.format("headrace")`; headrace is not on PyPI, so the extra installs from this checkout
spark-deps: $(VENV)/.spark
$(VENV)/.spark: pyproject.toml $(C_SOURCES) $(VENV)/.core
	$(PIP) install -q -e '.[spark]'
	touch $@

run: $(VENV)/.core
	$(VENV)/bin/headrace serve

# import-linter and mypy read the package tree from one directory, so they check a copy laid out the
# way the wheel is (headrace/<folder>); the editable install maps the folders instead.
LINT_TREE := build/lint
lint: $(VENV)/.dev
	rm -rf $(LINT_TREE) && mkdir -p $(LINT_TREE)/headrace
	cp -r headrace/. $(LINT_TREE)/headrace/
	for d in exchanges queues server persistence cli spark_bridge; do cp -r $$d $(LINT_TREE)/headrace/$$d; done
	cd $(LINT_TREE) && PYTHONPATH=. ../../$(VENV)/bin/lint-imports --config ../../pyproject.toml
	cd $(LINT_TREE) && ../../$(VENV)/bin/mypy --config-file ../../pyproject.toml --cache-dir ../mypy-cache -p headrace
	@# a type an annotation needs is imported plainly (ARCHITECTURE.md, "Layers"): an import under
	@# TYPE_CHECKING would hide a dependency the contracts above are there to see
	@! grep -rn --include='*.py' 'TYPE_CHECKING' $(LINT_TREE)/headrace || (echo "import it plainly instead (ARCHITECTURE.md, Layers)"; false)
	@# the broker, the sessions and the HTTP API ask a queue of any type through its Destination
	@# methods (queues/destination.py); only the shell's spill and stream parts know the types
	@! grep -rnE --include='*.py' 'isinstance\([^)]*, *(StreamQueue|Queue)\)|type\([a-z_.]+\) is (not )?(StreamQueue|Queue)\b|queue_type [!=]=' \
		$(LINT_TREE)/headrace/server/broker $(LINT_TREE)/headrace/server/session $(LINT_TREE)/headrace/server/http \
		|| (echo "ask the queue (queues/destination.py) instead of testing its type (ARCHITECTURE.md, Queue types)"; false)
	@# what the core calls in the shell is given at construction (ARCHITECTURE.md, "The shell's ports"):
	@# no callback defaults to doing nothing, and no one installs a port on another object afterwards
	@! grep -rnE --include='*.py' 'def _noop|def _nothing|lambda: None' server \
		|| (echo "a do-nothing default callback: take it as a constructor argument (ARCHITECTURE.md, The shell's ports)"; false)
	@! grep -rnE --include='*.py' '[A-Za-z_)]\.(on_[a-z_]+|after_group|wake) = ' server \
		| grep -v 'self\.\(on_[a-z_]*\|after_group\|wake\) = ' \
		|| (echo "a callback installed after construction: pass it to the constructor (ARCHITECTURE.md, The shell's ports)"; false)
	@# a class too big for one module is split into collaborators that own their state, not into a
	@# base class and its subclass in two modules (ARCHITECTURE.md, "Who owns what")
	cd $(LINT_TREE) && PYTHONPATH=. ../../$(PY) ../../tests/lint/class_bases.py \
		headrace.server.amqp headrace.server.session headrace.server.broker
	@# the protocol's events reach the session typed (server/amqp/events.py's Event union), not as Any
	@! grep -rnE --include='*.py' 'events: list\[Any\]|-> list\[Any\]' server/amqp server/session \
		|| (echo "the event seam is list[Event] (ARCHITECTURE.md, A message's way)"; false)

# RabbitMQ's own management CLI, rabbitmqadmin, for tests/e2e/test_e2e_rabbitmqadmin.py: taken out of
# Debian's rabbitmq-server package without installing it (a Python script: no Erlang, no service)
RABBITMQADMIN := build/rabbitmqadmin/rabbitmqadmin
$(RABBITMQADMIN):
	rm -rf build/rabbitmqadmin && mkdir -p build/rabbitmqadmin
	cd build/rabbitmqadmin && (apt-get download -q rabbitmq-server 2>/dev/null || \
		(apt-get update -q && apt-get download -q rabbitmq-server)) && dpkg-deb -x rabbitmq-server_*.deb deb
	cp build/rabbitmqadmin/deb/usr/bin/rabbitmqadmin $@
# ... and, from the same package, RabbitMQ's management UI (static files) for
# tests/e2e/test_e2e_rabbitmq_ui.py, which serves them with /api/* forwarded to the broker
RABBITMQ_UI := build/rabbitmqadmin/deb/usr/lib/rabbitmq/lib/rabbitmq_server-3.10.8/plugins/rabbitmq_management-3.10.8/priv/www/index.html
$(RABBITMQ_UI): $(RABBITMQADMIN)
	@test -f $@ || (echo "$@ missing: the rabbitmq-server package is not 3.10.8 (tests/e2e/rabbitmq_ui.py names it)"; false)

# Prometheus' promtool, for tests/e2e/test_e2e_metrics_exposition.py's `promtool check metrics` of
# every metrics endpoint: taken out of Debian's prometheus package without installing it (one Go
# binary; the package's server, web assets and service are not wanted)
PROMTOOL := build/promtool/promtool
$(PROMTOOL):
	rm -rf build/promtool && mkdir -p build/promtool
	cd build/promtool && (apt-get download -q prometheus 2>/dev/null || \
		(apt-get update -q && apt-get download -q prometheus)) && dpkg-deb -x prometheus_*.deb deb
	cp build/promtool/deb/usr/bin/promtool $@ && rm -rf build/promtool/deb build/promtool/prometheus_*.deb

# the Node amqplib client for tests/e2e/test_e2e_node.py, from tests/node's lock file
NODE_DIR := tests/node
$(NODE_DIR)/node_modules/.installed: $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	cd $(NODE_DIR) && npm ci --no-audit --no-fund
	touch $@

# the slowest tests are listed at the end: the suite is to stay well under 15 minutes
test: $(VENV)/.dev lint browser clients etcd $(RABBITMQADMIN) $(RABBITMQ_UI) $(PROMTOOL) $(NODE_DIR)/node_modules/.installed
	$(PY) -m pytest tests -n 2 --durations=15

# the suite checks that the install built the C modules (mirror framing, the AMQP wire), so it needs a C compiler
# and Python's headers: Debian's gcc and python3-dev when either is missing (as root, as CI runs)
compiler:
	@command -v cc >/dev/null && $(PYTHON) -c "import os, sys, sysconfig; \
		sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" || \
		(apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q gcc python3-dev)

# the Go, Ruby and Java clients' tests (tests/e2e/test_e2e_go_ruby_java.py) use Debian's Go with
# amqp091-go, Debian's Bunny, and Debian's RabbitMQ Java client run by the JDK's source launcher;
# installed once, as root (CI runs as root), when any of them is missing
clients:
	@command -v go >/dev/null && test -d /usr/share/gocode/src/github.com/rabbitmq/amqp091-go && \
		command -v ruby >/dev/null && ruby -e 'require "bunny"' 2>/dev/null && \
		test -f /usr/share/java/amqp-client.jar && java --list-modules 2>/dev/null | grep -q '^jdk.compiler@' || \
		(apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q golang-go \
			golang-github-rabbitmq-amqp091-go-dev ruby-bunny librabbitmq-client-java openjdk-17-jdk-headless)

# the web console's tests drive Debian's Chromium through its chromedriver (nothing is downloaded
# at test time); installed once, as root (CI runs as root)
browser: /usr/bin/chromium
/usr/bin/chromium:
	apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver

# the cluster tests (tests/cluster) start a real etcd, Debian's etcd-server (3.4: the v3 JSON
# gateway under /v3/), and the partition test puts nodes in network namespaces (iproute2's ip);
# installed once, as root (CI runs as root), when they are missing
etcd:
	@command -v etcd >/dev/null || \
		(apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q etcd-server)
	@command -v ip >/dev/null || \
		(apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2)

# amqplib and amqp091-go run through a failover there (test_cluster_clients.py), the console in Chromium
cluster: $(VENV)/.dev etcd clients browser $(NODE_DIR)/node_modules/.installed
	$(PY) -m pytest tests/cluster

unit: $(VENV)/.dev
	$(PY) -m pytest tests/unit tests/amqp

e2e: $(VENV)/.dev browser clients $(RABBITMQADMIN) $(RABBITMQ_UI) $(PROMTOOL) $(NODE_DIR)/node_modules/.installed
	$(PY) -m pytest tests/e2e

spark: $(VENV)/.dev
	$(PY) -m pytest tests/spark

# side by side with RabbitMQ when rabbitmq-server is installed, headrace alone otherwise
bench: $(VENV)/.dev
	$(PY) benchmarks/run.py --scenarios pubsub,confirms,fanout,topic,topic100k,latency,backlog,http-batch

# installs Debian's rabbitmq-server first (needs root / sudo), then runs the comparison
bench-rabbitmq: $(VENV)/.dev
	command -v rabbitmq-server >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q rabbitmq-server && (systemctl stop rabbitmq-server 2>/dev/null || service rabbitmq-server stop 2>/dev/null || true))
	$(PY) benchmarks/run.py --scenarios pubsub,confirms,fanout,topic,topic100k,latency,backlog,http-batch

bench-quick: $(VENV)/.dev
	$(PY) benchmarks/run.py --quick --pairs 1

# 30 minutes of mixed load on a real broker, RSS and latency sampled; fails if RSS grows past its
# bound after warm-up (benchmarks/soak.py; not part of `make test`). SOAK_MINUTES=... to change it
SOAK_MINUTES ?= 30
soak: $(VENV)/.dev
	$(PY) benchmarks/soak.py --minutes $(SOAK_MINUTES)

# a long fuzz run of the AMQP codec, the connection state machine and the HTTP layer
# (the bounded one runs in `make test`); FUZZ_EXAMPLES=... to change the size
FUZZ_EXAMPLES ?= 50000
fuzz: $(VENV)/.dev
	HEADRACE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest tests/amqp tests/e2e/test_e2e_http_fuzz.py -k fuzz -q -p no:timeout

clean:
	rm -rf $(VENV) build *.egg-info headrace-data $(NODE_DIR)/node_modules persistence/*.so server/amqp/*.so
