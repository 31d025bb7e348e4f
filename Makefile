# The README's two commands, as a thin wrapper over CMake and CTest.
#   make run    install what is missing, build dtmc, compile models/gpt.dtm for the
#               mesh RUN_MESH (dp=2 x tp=2: 4 ranks as threads of one process) and
#               train it RUN_STEPS steps (held-out loss every 50)
#   make test   install what is missing, build with -Werror and run every test,
#               then rebuild with ASan+UBSan and run the unit and diagnostic tests
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
DTMC = $(BUILD)/dtmc
RUN_STEPS ?= 300
RUN_MESH ?= dp=2,tp=2

.PHONY: run test deps build build-werror asan clean

deps:
	scripts/deps.sh

build: deps
	cmake -S . -B $(BUILD)
	cmake --build $(BUILD) -j $(JOBS)

run: build
	$(DTMC) check models/gpt.dtm --mesh $(RUN_MESH)
	$(DTMC) build models/gpt.dtm --mesh $(RUN_MESH) -o $(BUILD)/gpt
	$(BUILD)/gpt --steps $(RUN_STEPS) --eval-every 50 --log $(BUILD)/gpt.jsonl

build-werror: deps
	cmake -S . -B $(BUILD) -DDTM_WERROR=ON
	cmake --build $(BUILD) -j $(JOBS)

asan: deps
	cmake -S . -B $(ASAN_BUILD) -DDTM_WERROR=ON -DDTM_SANITIZE=ON
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS) -R '^(unit|diag)[.]'

test: build-werror
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)
	$(MAKE) --no-print-directory asan

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-fuzz
