PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
BASE := $(VENV)/.installed
SPARK := $(VENV)/.installed-spark
SOURCES := pyproject.toml setup.py rocketq/protocol/_codec.py rocketq/protocol/_ccodec.pxd \
	rocketq/store/_records.py rocketq/store/_crecords.pxd rocketq/store/_encode.py \
	rocketq/store/_cencode.pxd

.PHONY: run test test-deps lint bench bench-deps compare example clean grpc-proto

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# What a broker needs (make run), and on top of it what the tests need (make test): PySpark,
# pytest, the fuzzer, ruff.
$(BASE): $(SOURCES) | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $(BASE)

$(STAMP): $(SOURCES) | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP) $(BASE) $(SPARK)

# What the example needs: rocketq and PySpark (the spark extra), not the test tools.
$(SPARK): $(SOURCES) | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[spark]'
	touch $(SPARK) $(BASE)

# make run RUN_ARGS="--broker-port 10921" passes flags to rocketq standalone.
RUN_ARGS ?=
run: $(BASE)
	$(BIN)/rocketq standalone $(RUN_ARGS)

# The etcd server the controller's etcd engine is tested against (Debian's etcd-server), the
# headless Chromium and its driver the dashboard's browser tests drive, the openssl
# command the TLS tests handshake with, and ip and nft, with which the partition tests
# (tests/partitions, as root) put each process in a network namespace and cut links.
test-deps:
	@command -v etcd >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server)
	@(command -v chromium && command -v chromedriver) >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver)
	@command -v openssl >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl)
	@command -v ip >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2)
	@command -v nft >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables)
	@(command -v mkfs.ext4 && command -v losetup) >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq e2fsprogs mount)

# Every test runs on the compiled codec, spread over worker processes (most tests wait on
# sockets, sleeps and child processes, so more workers than cores pays); then the tests of
# what the codec reaches (frames, records, properties, batches, pull decoding, the store,
# the broker's send and pull) run again on its pure-Python twin.
TEST_WORKERS ?= 4
PURE_CODEC_TESTS := tests/protocol tests/store tests/remoting/test_remoting.py \
	tests/client/test_pulled_messages.py tests/client/test_auto_batch.py \
	tests/client/test_producer.py tests/broker/test_broker.py \
	tests/broker/test_send_header.py tests/broker/test_send_transforms.py \
	tests/broker/test_processors.py tests/compat/test_java_frames.py \
	tests/compat/test_mqadmin_frames.py
# With a C compiler here the build made the compiled twins, and the tests insist on them.
HAVE_CC := $(shell command -v cc >/dev/null 2>&1 && echo 1)
test: $(STAMP) test-deps
	$(BIN)/ruff check rocketq tests benchmarks examples
	ROCKETQ_REQUIRE_COMPILED=$(HAVE_CC) $(BIN)/python -m pytest -q -n $(TEST_WORKERS)
	ROCKETQ_NO_EXTENSIONS=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) \
		$(PURE_CODEC_TESTS)

lint: $(STAMP)
	$(BIN)/ruff check rocketq tests benchmarks examples

bench: $(STAMP)
	$(BIN)/python benchmarks/store_bench.py
	$(BIN)/python benchmarks/e2e_bench.py

# The peers compare_peers.py measures rocketq against (Debian packages) and their clients.
bench-deps: $(STAMP)
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server nats-server rabbitmq-server
	$(BIN)/pip install --quiet -e '.[dev,bench]'

compare: $(STAMP)
	$(BIN)/python benchmarks/compare_peers.py --rounds 3 --chart docs/benchmarks.png

example: $(SPARK)
	$(BIN)/python -m examples.clickstream

# The generated protobuf and gRPC modules of rocketq/grpc/proto, made again from the .proto
# files beside them (apache/rocketmq-apis); their imports point inside the package.
PROTO := rocketq/grpc/proto
grpc-proto: | $(BIN)/python
	$(BIN)/pip install --quiet grpcio-tools
	$(BIN)/python -m grpc_tools.protoc -I$(PROTO) --python_out=$(PROTO) --pyi_out=$(PROTO) \
		--grpc_python_out=$(PROTO) $(PROTO)/apache/rocketmq/v2/definition.proto \
		$(PROTO)/apache/rocketmq/v2/service.proto
	for f in $(PROTO)/apache/rocketmq/v2/*_pb2*.py*; do \
		sed 's/^from apache\.rocketmq\.v2 import /from . import /' $$f > $(PROTO)/$$(basename $$f); \
		rm $$f; \
	done
	rm -f $(PROTO)/definition_pb2_grpc.py

clean:
	rm -rf $(VENV) build *.egg-info rocketq/protocol/_ccodec*.so rocketq/store/_crecords*.so rocketq/store/_cencode*.so
