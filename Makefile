# Front door. `make demo` and `make test` install missing Debian packages first (as root),
# or print the exact apt-get command to run.
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release
PACKAGES := g++ cmake make libxtensor-dev libxsimd-dev libboost-dev catch2 libbenchmark-dev \
            libopenblas-dev libxtensor-blas-dev librandom123-dev libcli11-dev nlohmann-json3-dev \
            libstb-dev gnuplot-nox clang-format libopenmpi-dev openmpi-bin clang libomp-dev libclang-rt-14-dev \
            python3 python3-numpy python3-pytest python3-torch python3-venv python3-setuptools python3-wheel pkgconf

.PHONY: deps configure build demo test bench fuzz goldens clean

deps:
	@missing=$$(for p in $(PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing: $$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "missing packages; run: sudo apt-get install -y $$missing"; exit 1; fi; \
	fi

configure: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

demo: configure
	@cmake --build $(BUILD) -j $(JOBS) --target xattn-demo
	@# OpenMP (fused pass) and OpenBLAS (projections) share the cores: idle OpenMP threads must sleep.
	@OMP_WAIT_POLICY=passive $(BUILD)/dsl/xattn-demo
	@# the Python package: a score and a mask written in Python, fused (compiled on first use)
	@cmake --build $(BUILD) -j $(JOBS) --target xattn_python
	@PYTHONPATH=$(BUILD)/python OMP_WAIT_POLICY=passive /usr/bin/python3 python/examples/flex_demo.py

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: configure
	@$(MAKE) --no-print-directory deps PACKAGES=python3-torch  # the PyTorch baseline of the backward rows
	@cmake --build $(BUILD) -j $(JOBS) --target xattn-bench xattn-mpi-bench xattn_python
	@bash bench/run.sh $(BUILD)

fuzz: configure
	@cmake --build $(BUILD) -j $(JOBS) --target xattn-fuzz
	@$(BUILD)/tests/xattn-fuzz --cases 10000

# Regenerates tests/data/goldens from PyTorch autograd (Debian's python3-torch); the tests only
# read the committed files, so `make test` never needs torch.
goldens:
	@$(MAKE) --no-print-directory deps PACKAGES=python3-torch
	@/usr/bin/python3 tools/goldens/make_grad_goldens.py tests/data/goldens

clean:
	rm -rf $(BUILD)
