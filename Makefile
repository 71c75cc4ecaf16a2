# libckpt — plain make.  `make` builds everything into build/; `make V=1`
# shows the full commands.  `make demo` and `make test` first install the
# Debian packages the project needs (scripts/setup-deps).
#
# Sources are picked up by directory, so adding a file needs no edit here:
#   interpose/*.c runtime/*.c    -> build/lib/libckpt.so
#   tools/<tool>/*.c             -> build/bin/<tool>   (+ runtime/ objects)
#   replica/*.c                  -> into the tools named in REPLICA_TOOLS (+ -lfabric)
#   tests/fake/{driver,runtime,nccl}/*.c + tests/fake/common/*.c
#                                -> build/fake/libcuda.so.1, libcudart.so.13, libnccl.so.2
#   tests/fake/test/*.c          -> build/tests/fake/<name>   (linked against the double)
#   tests/unit/*.c               -> build/tests/unit/<name>   (+ runtime/ objects)
#   tests/progs/*.c              -> build/tests/progs/<name>  (programs the scenarios run)
#   bench/*.c                    -> build/bench/<name>

V ?= 0
Q := $(if $(filter 1,$(V)),,@)
say = $(if $(filter 1,$(V)),,@printf '  %-7s %s\n' $(1) $(2);)

B       := build
PREFIX  ?= /usr/local
CC      ?= cc
CFLAGS  ?= -O2 -g
WERROR  ?= -Werror
CUDA_HOME ?= $(firstword $(wildcard /usr/local/cuda))
NVCC    := $(if $(CUDA_HOME),$(wildcard $(CUDA_HOME)/bin/nvcc))

WARN     := -Wall -Wextra $(WERROR)
ALL_CFLAGS = -std=gnu11 -fPIC -pthread -D_GNU_SOURCE $(WARN) -Iinclude -Iinterpose/abi -Iruntime $(CFLAGS)
DEPFLAGS = -MMD -MP

# The double's public headers (cuda.h, cuda_runtime.h, nccl.h) for programs
# built against it; examples/common holds the portable kernel convention.
PROG_CFLAGS = -Itests/fake/include -Iexamples/common
FAKE_LIBS   = -L$(B)/fake -lcudart -lcuda -lnccl -Wl,-rpath,'$$ORIGIN/../../fake'

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))

FAKE_COMMON_SRC := $(wildcard tests/fake/common/*.c)
FAKE_DRV_SRC    := $(wildcard tests/fake/driver/*.c)
FAKE_RT_SRC     := $(wildcard tests/fake/runtime/*.c)
FAKE_NCCL_SRC   := $(wildcard tests/fake/nccl/*.c)
RUNTIME_SRC     := $(wildcard runtime/*.c)
# What only the node agent and the tools use (disk I/O with liburing,
# placement) stays out of libckpt.so: the rank's library needs nothing that
# a GPU machine's training image might lack.
AGENT_ONLY_SRC  := $(wildcard runtime/persist*.c runtime/placement.c runtime/recovery.c)
LIBCKPT_SRC     := $(wildcard interpose/*.c) $(filter-out $(AGENT_ONLY_SRC),$(RUNTIME_SRC))
TOOLS           := $(notdir $(wildcard tools/*))
FAKE_TESTS      := $(patsubst tests/fake/test/%.c,$(B)/tests/fake/%,$(wildcard tests/fake/test/*.c))
UNIT_TESTS      := $(patsubst tests/unit/%.c,$(B)/tests/unit/%,$(wildcard tests/unit/*.c))
PROGS           := $(patsubst tests/progs/%.c,$(B)/tests/progs/%,$(wildcard tests/progs/*.c))
BENCHES         := $(patsubst bench/%.c,$(B)/bench/%,$(wildcard bench/*.c))

FAKE_LIBS_OUT := $(B)/fake/libcuda.so.1 $(B)/fake/libcudart.so.13 $(B)/fake/libnccl.so.2
# libckpt's helper for PyTorch (beside libckpt.so, where ckpt-resume finds
# it), and the double of PyTorch its tests run on.
TORCH_HELPER_OUT := $(patsubst tools/ckpt-resume/python/%,$(B)/lib/libckpt-python/%,$(wildcard tools/ckpt-resume/python/*.py))
FAKE_TORCH_OUT := $(B)/fake/torch/libc10_cuda.so $(B)/fake/torch/torch/__init__.py
EXAMPLES      := $(B)/examples/mlp-train
ifneq ($(NVCC),)
EXAMPLES      += $(B)/examples/mlp-train-cuda $(B)/examples/mlp-train-cuda-shared
endif

all: $(B)/lib/libckpt.so $(addprefix $(B)/bin/,$(TOOLS)) $(FAKE_LIBS_OUT) $(EXAMPLES) \
     $(FAKE_TESTS) $(UNIT_TESTS) $(PROGS) $(BENCHES) $(TORCH_HELPER_OUT) $(FAKE_TORCH_OUT)

$(B)/obj/%.o: %.c
	$(call say,CC,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) $(DEPFLAGS) -c $< -o $@

# ---- libckpt.so: hidden by default, exports only what libckpt.map lists.
$(B)/lib/libckpt.so: $(call obj,$(LIBCKPT_SRC)) interpose/libckpt.map
	$(call say,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -shared -pthread -fvisibility=hidden -Wl,-z,defs -Wl,--version-script=interpose/libckpt.map \
	    -o $@ $(call obj,$(LIBCKPT_SRC)) -ldl
$(call obj,$(LIBCKPT_SRC)): ALL_CFLAGS += -fvisibility=hidden
# dlsym runs inside sanitizer runtimes' start-up: never instrumented, and
# its RTLD_NEXT path must be a sibling call (tests/scenarios/capture.bats).
$(B)/obj/interpose/dlsym.o: ALL_CFLAGS += -fno-sanitize=all -O2 -foptimize-sibling-calls
# libc functions libckpt interposes run in every process it is preloaded
# into, also before a sanitizer runtime it brings has started (a library's
# constructor opens a file; a new thread's first steps come before the
# sanitizer's own start routine): never instrumented either.
$(B)/obj/interpose/thread.o $(B)/obj/interpose/world.o $(B)/obj/interpose/rendezvous.o $(B)/obj/interpose/addrspace.o: \
    ALL_CFLAGS += -fno-sanitize=all

# ---- tools: each tools/<name>/ is one program, linked with runtime/.
define tool_rule
$(B)/bin/$(1): $(call obj,$(wildcard tools/$(1)/*.c) $(RUNTIME_SRC))
	$$(call say,LD,$$@)
	$(Q)mkdir -p $$(@D)
	$(Q)$$(CC) $$(LDFLAGS) -pthread -o $$@ $$^ -ldl -luring $$(TOOL_LIBS)
endef
$(foreach t,$(TOOLS),$(eval $(call tool_rule,$(t))))
$(B)/bin/ckpt-doctor: TOOL_LIBS := -lelf
$(B)/bin/ckpt-sim: TOOL_LIBS := -lm

# ---- replica/: replication's data path (libfabric), linked only into the
# tools that move replicas, never into libckpt.so.  A tool that uses it
# lists it here: replica/ objects as prerequisites (the link takes $^),
# -lfabric, and -Ireplica for its sources.
REPLICA_SRC   := $(wildcard replica/*.c)
REPLICA_TOOLS := ckpt-replica ckpt-resume
$(addprefix $(B)/bin/,$(REPLICA_TOOLS)): $(call obj,$(REPLICA_SRC))
$(addprefix $(B)/bin/,$(REPLICA_TOOLS)): TOOL_LIBS := -lfabric -lnettle
$(foreach t,$(REPLICA_TOOLS),$(eval $(B)/obj/tools/$(t)/%.o: ALL_CFLAGS += -Ireplica))
# The agents' control plane on several nodes: etcd, through its JSON gateway.
$(B)/bin/ckpt-resume: TOOL_LIBS += -lcurl -ljson-c -lmicrohttpd

# ---- the test double of the GPU stack, with the real sonames.  Calls
# inside one library bind to its own functions (-Bsymbolic-functions), as
# in the vendor's libraries: an interposer sees what programs call, never
# the library's internal calls to its own exports.
$(B)/fake/libcuda.so.1: $(call obj,$(FAKE_DRV_SRC) $(FAKE_COMMON_SRC)) tests/fake/driver/libcuda.map
	$(call say,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -shared -pthread -Wl,-soname,libcuda.so.1 -Wl,-Bsymbolic-functions -Wl,--version-script=tests/fake/driver/libcuda.map \
	    -o $@ $(call obj,$(FAKE_DRV_SRC) $(FAKE_COMMON_SRC)) -lrt
	$(Q)ln -sf libcuda.so.1 $(B)/fake/libcuda.so
# The runtime dlopens libcuda.so.1; RUNPATH $ORIGIN finds the sibling driver
# for programs whose own RUNPATH (which dlopen ignores) points at build/fake.
$(B)/fake/libcudart.so.13: $(call obj,$(FAKE_RT_SRC) $(FAKE_COMMON_SRC)) tests/fake/runtime/libcudart.map
	$(call say,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -shared -pthread -Wl,-soname,libcudart.so.13 -Wl,-Bsymbolic-functions -Wl,--version-script=tests/fake/runtime/libcudart.map \
	    -Wl,-rpath,'$$ORIGIN' -o $@ $(call obj,$(FAKE_RT_SRC) $(FAKE_COMMON_SRC)) -ldl
	$(Q)ln -sf libcudart.so.13 $(B)/fake/libcudart.so
$(B)/fake/libnccl.so.2: $(call obj,$(FAKE_NCCL_SRC) $(FAKE_COMMON_SRC)) tests/fake/nccl/libnccl.map
	$(call say,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -shared -pthread -Wl,-soname,libnccl.so.2 -Wl,-Bsymbolic-functions -Wl,--version-script=tests/fake/nccl/libnccl.map \
	    -Wl,-rpath,'$$ORIGIN' -o $@ $(call obj,$(FAKE_NCCL_SRC) $(FAKE_COMMON_SRC)) -ldl -lrt
	$(Q)ln -sf libnccl.so.2 $(B)/fake/libnccl.so

$(B)/lib/libckpt-python/%.py: tools/ckpt-resume/python/%.py
	$(Q)mkdir -p $(@D) && cp $< $@
$(B)/fake/torch/torch/__init__.py: tests/fake/torch/torch/__init__.py
	$(Q)mkdir -p $(@D) && cp $< $@
$(B)/fake/torch/libc10_cuda.so: $(B)/obj/tests/fake/torch/c10_cuda.o $(FAKE_LIBS_OUT)
	$(call say,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(filter-out -fsanitize=%,$(LDFLAGS)) -shared -pthread -Wl,-soname,libc10_cuda.so -o $@ $< -L$(B)/fake -lcudart \
	    -Wl,-rpath,'$$ORIGIN/..'
# Never instrumented: a plain python3 loads it, without a sanitizer's runtime.
$(B)/obj/tests/fake/torch/%.o: ALL_CFLAGS += $(PROG_CFLAGS) -fno-sanitize=all

# ---- programs built against the double (one level below build/).
$(B)/tests/fake/% $(B)/tests/progs/%: ALL_CFLAGS += $(PROG_CFLAGS)
$(B)/tests/fake/%: $(B)/obj/tests/fake/test/%.o $(FAKE_LIBS_OUT)
	$(call say,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -pthread -o $@ $< $(FAKE_LIBS) -ldl
# --as-needed: a program that reaches CUDA only through dlopen keeps no
# link-time dependency on it (tests/progs/shapes.c relies on that).
$(B)/tests/progs/%: $(B)/obj/tests/progs/%.o $(FAKE_LIBS_OUT)
	$(call say,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -pthread -o $@ $< -Wl,--as-needed $(FAKE_LIBS) -ldl
$(B)/obj/tests/fake/test/%.o $(B)/obj/tests/progs/%.o: ALL_CFLAGS += $(PROG_CFLAGS)
# The real NVTX v3 client, header-only, from the toolkit when there is one;
# -idirafter so that the double's cuda.h still wins over the toolkit's.
$(B)/obj/tests/progs/nvtx_train.o: ALL_CFLAGS += $(if $(CUDA_HOME),-idirafter $(CUDA_HOME)/include)

$(B)/tests/unit/%: $(B)/obj/tests/unit/%.o $(call obj,$(RUNTIME_SRC))
	$(call say,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -pthread -o $@ $^ -ldl -luring $(UNIT_LIBS)
# The control channel's authentication is tested on its own, with the wire it seals.
$(B)/tests/unit/wire_auth: $(call obj,replica/auth.c replica/wire.c)
$(B)/tests/unit/wire_auth: UNIT_LIBS := -lnettle
$(B)/obj/tests/unit/wire_auth.o: ALL_CFLAGS += -Ireplica
# A rank's replay log between agents, over loopback.
$(B)/tests/unit/logship: $(call obj,tools/ckpt-resume/logship.c replica/auth.c replica/wire.c)
$(B)/tests/unit/logship: UNIT_LIBS := -lnettle
$(B)/obj/tests/unit/logship.o: ALL_CFLAGS += -Itools/ckpt-resume -Ireplica
# torchrun's command for the standbys.
$(B)/tests/unit/torchrun: $(call obj,tools/ckpt-resume/torchrun.c)
$(B)/obj/tests/unit/torchrun.o: ALL_CFLAGS += -Itools/ckpt-resume
# The etcd client, against an etcd the test starts.
$(B)/tests/unit/etcd: $(call obj,tools/ckpt-resume/etcd.c)
$(B)/tests/unit/etcd: UNIT_LIBS := -lcurl -ljson-c -lnettle
$(B)/obj/tests/unit/etcd.o: ALL_CFLAGS += -Itools/ckpt-resume

# (build/bench/ is one level below build/, so its RUNPATH is ../fake.)
$(B)/bench/%: $(B)/obj/bench/%.o $(FAKE_LIBS_OUT)
	$(call say,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -pthread -o $@ $< $(subst ../../fake,../fake,$(FAKE_LIBS)) -ldl
$(B)/obj/bench/%.o: ALL_CFLAGS += $(PROG_CFLAGS)

# ---- the example trainer: one CUDA C source, built against the double
# (as C, kernels are host functions: examples/common/kernels.h) and, where
# a toolkit exists, by nvcc for sm_90 with the static and the shared runtime.
MLP_SRC := examples/mlp/mlp_train.cu
$(B)/examples/mlp-train: $(MLP_SRC) $(wildcard examples/common/*.h examples/mlp/*.h) $(FAKE_LIBS_OUT)
	$(call say,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -x c $(ALL_CFLAGS) $(PROG_CFLAGS) -o $@ $(MLP_SRC) \
	    -L$(B)/fake -lcudart -lnccl -Wl,-rpath,'$$ORIGIN/../fake' -lm
NVCC_FLAGS := -O2 -arch=sm_90 -Iexamples/common -Xcompiler -Wall,-Wextra
$(B)/examples/mlp-train-cuda: $(MLP_SRC) $(wildcard examples/common/*.h examples/mlp/*.h)
	$(call say,NVCC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(NVCC) $(NVCC_FLAGS) -o $@ $(MLP_SRC) -lnccl
$(B)/examples/mlp-train-cuda-shared: $(MLP_SRC) $(wildcard examples/common/*.h examples/mlp/*.h)
	$(call say,NVCC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(NVCC) $(NVCC_FLAGS) -cudart shared -o $@ $(MLP_SRC) -lnccl

.SECONDARY:
-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)

# ---- set-up, tests, demo, benchmarks, install.
.PHONY: all deps test check demo demo-nodes bench install clean abi-check check-sanitize check-tsan fuzz soak
deps:
	$(Q)scripts/setup-deps

# `make test` = set-up, build, then every test; ends with "N passed, N failed".
test: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)tests/run
check: test

# The fault matrix at length: SOAK_CELLS cells of tests/matrix/cells (each
# seed printed), then a summary table.  SOAK_SEED=S replays a soak.
SOAK_CELLS ?= 200
soak: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)tests/matrix/run --cells $(SOAK_CELLS) $(if $(SOAK_SEED),--seed $(SOAK_SEED))

# Every test again with AddressSanitizer and UndefinedBehaviorSanitizer, in
# build-asan/, but those tagged `long` (runs whose point is their length,
# whose code the shorter ones beside them run too) or `covered` (a second
# shape of a path other tests run under the sanitizers: 4 nodes and 8
# beside 2x2, tagged messages and network namespaces beside the plain
# transport, the launcher's, the fences' and the standbys' failure
# variants, the 3-node demo beside etcd.bats' 3 nodes, the fault matrix's
# random cells; they keep CI within its hour and a half).  libckpt.so is
# preloaded into sanitized programs, so the runtime's link-order check is
# relaxed; leak checking is off (forked ranks and worker threads that
# outlive main are expected).  ASan's dlopen
# interceptor hides the fake libraries' RUNPATH from their dlopen calls,
# hence LD_LIBRARY_PATH.
SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
check-sanitize: deps
	$(Q)$(MAKE) --no-print-directory B=build-asan CFLAGS="-O1 -g $(SAN)" LDFLAGS="$(SAN)" all
	$(Q)BUILD=$(CURDIR)/build-asan ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0 \
	    UBSAN_OPTIONS=print_stacktrace=1 LD_LIBRARY_PATH=$(CURDIR)/build-asan/fake TEST_SKIP_TAGS=long,covered tests/run

# ThreadSanitizer on the tests whose code runs threads of its own, in
# build-tsan/: the snapshot engine's committer beside the program (unit/
# capture, capture, restore), the persist engine's I/O threads
# (unit/persist*) and ckpt-resume's persist thread beside its launcher and
# agent channel (persist), programs whose own threads replay beside each
# other and go live at a restore (fidelity), a program's thread answering
# the snapshots' questions (footprint), the pacer's copies before writes
# beside the committer and ckpt-resume's persist worker (schedule).  The
# double's emulated device threads and the timeline's seqlock are
# suppressed (tests/tsan.supp says why).  Not in the subset: the double's
# own tests, resume.bats (its restarts and agent channel run in persist's
# and schedule's jobs as well; its bounds are a plain build's), the tests
# of several nodes (whose agents' fabric threads are libfabric's, not
# built with the sanitizer), and the standbys' (their 20,000-iteration
# runs take many minutes sanitized); nor the tests tagged `long` or
# `covered` (above).
TSAN := -fsanitize=thread -fno-omit-frame-pointer
TSAN_TESTS := unit/ capture restore persist fidelity footprint schedule
check-tsan: deps
	$(Q)$(MAKE) --no-print-directory B=build-tsan CFLAGS="-O1 -g $(TSAN) -Wno-tsan" LDFLAGS="$(TSAN)" all
	$(Q)BUILD=$(CURDIR)/build-tsan LD_LIBRARY_PATH=$(CURDIR)/build-tsan/fake TEST_UNDER_TSAN=1 \
	    TSAN_OPTIONS="report_thread_leaks=0 report_signal_unsafe=0 history_size=4 suppressions=$(CURDIR)/tests/tsan.supp" \
	    TEST_SKIP_TAGS=long,covered tests/run $(TSAN_TESTS)

# Fuzzing with libFuzzer (clang): each tests/fuzz/<name>.c against runtime/
# (and replica/wire.c, ckpt-resume's channel.c or coord.c with fence.c and spawn.c, for the targets
# that fuzz them), for FUZZ_SECONDS each, from the corpus kept in
# tests/fuzz/corpus/<name>/ (new interesting inputs are added there).  A
# crash stops it with the input saved in build-fuzz/; that input then goes
# into tests/fuzz/regressions/<name>/, replayed first on every run.
FUZZ_SECONDS ?= 30
FUZZ_FLAGS := -g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
FUZZERS := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/*.c))
FUZZ_OBJS := $(patsubst %.c,build-fuzz/obj/%.o,$(RUNTIME_SRC))
FUZZ_EXTRA_wire := build-fuzz/obj/replica/wire.o build-fuzz/obj/replica/auth.o -Ireplica -lnettle
FUZZ_EXTRA_channel := build-fuzz/obj/tools/ckpt-resume/channel.o -Itools/ckpt-resume
FUZZ_EXTRA_coord := build-fuzz/obj/tools/ckpt-resume/coord.o build-fuzz/obj/tools/ckpt-resume/coord_round.o \
    build-fuzz/obj/tools/ckpt-resume/fence.o build-fuzz/obj/tools/ckpt-resume/spawn.o $(FUZZ_EXTRA_wire) -Itools/ckpt-resume
fuzz: deps
	$(Q)$(MAKE) --no-print-directory -s B=build-fuzz CC=clang CFLAGS="$(FUZZ_FLAGS)" $(FUZZ_OBJS) \
	    $(filter %.o,$(FUZZ_EXTRA_wire) $(FUZZ_EXTRA_channel) $(FUZZ_EXTRA_coord))
	$(Q)for f in $(FUZZERS); do \
	    case $$f in wire) extra="$(FUZZ_EXTRA_wire)" ;; channel) extra="$(FUZZ_EXTRA_channel)" ;; \
	        coord) extra="$(FUZZ_EXTRA_coord)" ;; *) extra= ;; esac; \
	    clang $(FUZZ_FLAGS) -fsanitize=fuzzer -std=gnu11 -D_GNU_SOURCE -Iruntime -o build-fuzz/fuzz-$$f \
	        tests/fuzz/$$f.c $$extra $(FUZZ_OBJS) -pthread -ldl -luring || exit 1; \
	    mkdir -p tests/fuzz/corpus/$$f; \
	    if [ -d tests/fuzz/regressions/$$f ]; then \
	        (cd build-fuzz && ./fuzz-$$f -runs=0 ../tests/fuzz/regressions/$$f >fuzz-$$f.regressions 2>&1) \
	            || { echo "fuzz: $$f: a regression input fails again (build-fuzz/fuzz-$$f.regressions)"; exit 1; }; \
	    fi; \
	    echo "fuzz: $$f for $(FUZZ_SECONDS) s"; \
	    (cd build-fuzz && ./fuzz-$$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	        ../tests/fuzz/corpus/$$f >fuzz-$$f.log 2>&1); rc=$$?; \
	    grep -E "^(stat::number_of_executed_units|==.*ERROR|SUMMARY)" build-fuzz/fuzz-$$f.log; \
	    [ $$rc -eq 0 ] || { echo "fuzz: $$f failed (build-fuzz/fuzz-$$f.log)"; exit 1; }; \
	done

abi-check:
	$(Q)tests/abi/check $(CUDA_HOME)

demo: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)scripts/demo

demo-nodes: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)scripts/demo-nodes

bench: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)bench/run

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib
	install -m 0755 $(addprefix $(B)/bin/,$(TOOLS)) $(DESTDIR)$(PREFIX)/bin/
	install -m 0755 $(B)/lib/libckpt.so $(DESTDIR)$(PREFIX)/lib/
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/libckpt-python
	install -m 0644 include/libckpt.h $(DESTDIR)$(PREFIX)/include/
	install -m 0644 tools/ckpt-resume/python/*.py $(DESTDIR)$(PREFIX)/lib/libckpt-python/
	install -d $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 0644 docs/man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/

clean:
	rm -rf $(B)
