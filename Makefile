# The README's two commands:
#   make run    install missing Debian packages, build, start the server
#   make test   the same set-up, then the whole test suite (GPU tests skip without a GPU)
BUILD_DIR ?= build
BUILD_TYPE ?= Release
CMAKE_ARGS ?=
JOBS ?= $(shell nproc)
SERVER_ARGS ?=

.PHONY: all deps configure build run test test-gpu clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS)

configure: deps $(BUILD_DIR)/build.ninja

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	$(BUILD_DIR)/bin/jagrank-server --config config/server.yaml $(SERVER_ARGS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# Only the GPU-labelled tests (on a machine with a GPU).
test-gpu: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L gpu

clean:
	rm -rf $(BUILD_DIR)
