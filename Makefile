# luarig — plain GNU make.
#
#   make          build build/luarig
#   make install  the binary, luarig(1) and bash completion under PREFIX (/usr/local;
#                 DESTDIR stages them); make uninstall removes them
#   make deps     install the Debian packages the project needs (as root)
#   make demo     deps, build, run the quickstart (scripts/quickstart.lua --yes)
#   make test     build and run every suite; last line "N passed, N failed, N skipped"
#   make check    the tests again under ASan + UBSan with -Werror, plus lint
#   make bench    the benchmarks in tests/bench/ (ratios against peers)
#   make fuzz     the libFuzzer targets (clang) in build/fuzz/

BUILD ?= build
CC ?= cc
PKG_CONFIG ?= pkg-config

# Linked: what every run needs. Headers only: libraries opened on first use
# (util/lazy.c), so start-up does not pay for them.
PKGS := lua5.4 libevent jansson lmdb
LAZY_PKGS := libcurl libarchive libcrypto libedit libseccomp libnats

WARN := -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes \
	-Wmissing-prototypes -Wold-style-definition -Wvla -Wformat=2 -fno-common
OPT ?= -O2 -g
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE $(OPT) $(WARN) \
	$(shell $(PKG_CONFIG) --cflags $(PKGS) $(LAZY_PKGS) 2>/dev/null)
# libevent, jansson and LMDB are linked in from their archives (Debian's -dev
# packages ship them): three shared objects fewer for the dynamic loader to
# map at every start. Lua stays shared, so that a C module a rig requires
# finds the same Lua. STATIC_DEPS=0 links all of them shared.
STATIC_DEPS ?= 1
DYN_LIBS := $(shell $(PKG_CONFIG) --libs $(PKGS) 2>/dev/null) -llua5.4-cjson -ldl -lpthread -lm
ifeq ($(STATIC_DEPS),1)
LDLIBS := $(shell $(PKG_CONFIG) --libs lua5.4 2>/dev/null) \
	-Wl,-Bstatic $(shell $(PKG_CONFIG) --libs libevent jansson lmdb 2>/dev/null) -Wl,-Bdynamic \
	-llua5.4-cjson -ldl -lpthread -lm
else
LDLIBS := $(DYN_LIBS)
endif

ifeq ($(SAN),1)
BASE_CFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
WERROR := 1
endif
ifeq ($(WERROR),1)
BASE_CFLAGS += -Werror
endif
CFLAGS_ALL = $(BASE_CFLAGS) $(CFLAGS)

# Every .c under these folders is part of the library; lua/main.c is the executable.
LIB_SRC := $(wildcard util/*.c storage/*.c sandbox/*.c host/*.c cli/*.c lua/*.c)
LIB_SRC := $(filter-out lua/main.c,$(LIB_SRC))
LIB_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(LIB_SRC)) $(BUILD)/gen/stdlib.o $(BUILD)/gen/seccomp_bpf.o
# (and the web console's files, served by rig.serve: docs/design/serve.md)
STDLIB := $(sort $(wildcard stdlib/*.lua stdlib/*/*.lua stdlib/*/*/*.lua \
	stdlib/rig/console/*.html stdlib/rig/console/*.js stdlib/rig/console/*.css))
HEADERS := $(wildcard util/*.h storage/*.h sandbox/*.h host/*.h cli/*.h lua/*.h)

UNIT_SRC := $(wildcard tests/unit/*_test.c)
UNIT_BIN := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_SRC))
FUZZ_SRC := $(wildcard tests/fuzz/*_fuzz.c)
FUZZ_REPLAY := $(patsubst tests/fuzz/%.c,$(BUILD)/tests/fuzz/%_replay,$(FUZZ_SRC))
FUZZ_BIN := $(patsubst tests/fuzz/%.c,build/fuzz/%,$(FUZZ_SRC))

.PHONY: all deps demo test check torture soak bench fuzz fuzz-run clean lint layering symbols install uninstall
.DELETE_ON_ERROR:

all: $(BUILD)/luarig

$(BUILD)/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/embed: tools/embed.c
	@mkdir -p $(dir $@)
	$(CC) -O1 -o $@ $<

$(BUILD)/gen/stdlib.c: $(BUILD)/embed $(STDLIB)
	@mkdir -p $(dir $@)
	$(BUILD)/embed $@ $(STDLIB)

$(BUILD)/gen/stdlib.o: $(BUILD)/gen/stdlib.c
	$(CC) $(filter-out -Wmissing-prototypes,$(CFLAGS_ALL)) -Wno-missing-variable-declarations -c $< -o $@

# The seccomp programs, compiled once at build time (tools/seccompgen.c).
SECCOMPGEN_OBJ := $(BUILD)/sandbox/seccomp.o $(BUILD)/util/lazy.o $(BUILD)/util/err.o
$(BUILD)/seccompgen: tools/seccompgen.c $(SECCOMPGEN_OBJ) $(HEADERS)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(SECCOMPGEN_OBJ) $(LDFLAGS) -ldl -lpthread

$(BUILD)/gen/seccomp_bpf.c: $(BUILD)/seccompgen
	@mkdir -p $(dir $@)
	$(BUILD)/seccompgen $@

$(BUILD)/gen/seccomp_bpf.o: $(BUILD)/gen/seccomp_bpf.c
	$(CC) $(CFLAGS_ALL) -I. -c $< -o $@

$(BUILD)/libluarig.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/luarig: $(BUILD)/lua/main.o $(BUILD)/libluarig.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/unit/%: tests/unit/%.c tests/unit/test.h $(BUILD)/libluarig.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(BUILD)/libluarig.a $(LDFLAGS) $(LDLIBS)

# Benchmark programs (tests/bench/*.c); SQLite is their peer, linked here only.
$(BUILD)/tests/bench/%: tests/bench/%.c $(BUILD)/libluarig.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(BUILD)/libluarig.a $(LDFLAGS) $(LDLIBS) -lsqlite3

# The fuzz targets, replayed over their corpora by an ordinary main().
$(BUILD)/tests/fuzz/%_replay: tests/fuzz/%.c tests/fuzz/replay.c $(BUILD)/libluarig.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< tests/fuzz/replay.c $(BUILD)/libluarig.a $(LDFLAGS) $(LDLIBS)

test-build: $(BUILD)/luarig $(UNIT_BIN) $(FUZZ_REPLAY)

# The allocation-failure mode (tests/torture/README.md): luarig's own objects
# linked with the allocation functions wrapped by tests/torture/shim.c, so
# that LUARIG_TORTURE=N fails the Nth allocation. Sanitizer builds only (the
# point is ASan watching the failure paths); never installed. Linked with the
# shared libraries, so that the wrap counts luarig's allocations, not those
# inside libevent, jansson and LMDB.
comma := ,
TORTURE_WRAP := $(addprefix -Wl$(comma)--wrap=,malloc calloc realloc strdup strndup \
	asprintf vasprintf realpath lr_loop_run)
$(BUILD)/luarig-torture: $(BUILD)/lua/main.o $(BUILD)/tests/torture/shim.o $(BUILD)/libluarig.a
	$(CC) $(LDFLAGS) $(TORTURE_WRAP) -o $@ $^ $(DYN_LIBS)

# Every N over each case of tests/torture/cases.txt, under ASan (part of make check).
torture:
	$(MAKE) --no-print-directory SAN=1 BUILD=build/san build/san/luarig-torture
	@BUILD=build/san sh tests/torture/run.sh

test: test-build
	@BUILD=$(BUILD) sh tests/run.sh

# The kill storms (docs/soak.md): long, not part of test or CI.
# make soak KILLS=1000 [LONG_TURNS=…] [CLUSTER_KILLS=…] [PARTITIONS=…] [STORMS="lmdb nats …"]
soak: $(BUILD)/luarig
	@LUARIG=$(CURDIR)/$(BUILD)/luarig KILLS=$(KILLS) LONG_TURNS=$(LONG_TURNS) \
		CLUSTER_KILLS=$(CLUSTER_KILLS) PARTITIONS=$(PARTITIONS) STORMS="$(STORMS)" \
		sh tests/soak/run.sh

# Sanitized build in its own folder, the same suites, then lint.
check:
	$(MAKE) --no-print-directory SAN=1 BUILD=build/san test-build
	@BUILD=build/san ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 sh tests/run.sh
	$(MAKE) --no-print-directory torture
	$(MAKE) --no-print-directory lint

lint: layering symbols
	@cppcheck --quiet --error-exitcode=1 --enable=warning,portability \
		--suppress=missingIncludeSystem --inline-suppr -D_GNU_SOURCE \
		util storage sandbox host cli lua && echo "lint: cppcheck clean"

# Layering is one way: util -> storage, sandbox -> host -> cli -> lua. Only lua/ may
# include a Lua header; checked on the includes and on the objects' symbols
# (tools/layering.sh says how).
layering: $(BUILD)/libluarig.a
	@sh tools/layering.sh $(BUILD)

# Every global symbol of the library is lr_/lr__/luaopen_ (SQLite's exported-symbol check).
symbols: $(BUILD)/libluarig.a
	@bad=$$(nm -g --defined-only $(BUILD)/libluarig.a | awk 'NF==3 {print $$3}' | \
		grep -vE '^(lr_|lr__|luaopen_)' | sort -u); \
	if [ -n "$$bad" ]; then echo "symbols: unprefixed globals:"; echo "$$bad"; exit 1; fi; \
	echo "symbols: ok"

BENCH_BIN := $(patsubst tests/bench/%.c,$(BUILD)/tests/bench/%,$(wildcard tests/bench/*.c))
bench: $(BUILD)/luarig $(BENCH_BIN)
	@sh tools/deps.sh bench
	@BUILD=$(BUILD) sh tests/bench/run.sh

fuzz: $(FUZZ_BIN)

# The library is archived, so a target links only the objects it uses (a
# lua/ file may call into lua/main.c, which a fuzz binary does not have).
FUZZ_CC = clang -std=c11 -D_GNU_SOURCE -g -O1 $(shell $(PKG_CONFIG) --cflags $(PKGS) $(LAZY_PKGS))

build/fuzz/obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -fsanitize=fuzzer-no-link,address,undefined -c $< -o $@

build/fuzz/obj/build/gen/seccomp_bpf.o: build/gen/seccomp_bpf.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -I. -fsanitize=fuzzer-no-link,address,undefined -c $< -o $@

build/fuzz/libluarig.a: $(patsubst %.c,build/fuzz/obj/%.o,$(LIB_SRC) build/gen/stdlib.c build/gen/seccomp_bpf.c)
	@rm -f $@
	ar rcs $@ $^

build/fuzz/%: tests/fuzz/%.c build/fuzz/libluarig.a
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -fsanitize=fuzzer,address,undefined -o $@ $< build/fuzz/libluarig.a $(LDLIBS)

build/gen/stdlib.c: build/embed $(STDLIB)
build/gen/seccomp_bpf.c: build/seccompgen

# Installing like a Unix tool: PREFIX, DESTDIR (a staging root) and the
# three directories, each overridable; the completion goes where Debian's
# bash-completion package loads it from on first use (docs/cli.md).
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
INSTALL ?= install

install: $(BUILD)/luarig
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(BASHCOMPDIR)
	$(INSTALL) -m 0755 $(BUILD)/luarig $(DESTDIR)$(BINDIR)/luarig
	$(INSTALL) -m 0644 share/man/man1/luarig.1 $(DESTDIR)$(MANDIR)/man1/luarig.1
	$(INSTALL) -m 0644 share/bash-completion/completions/luarig $(DESTDIR)$(BASHCOMPDIR)/luarig

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/luarig $(DESTDIR)$(MANDIR)/man1/luarig.1 \
		$(DESTDIR)$(BASHCOMPDIR)/luarig

deps:
	@sh tools/deps.sh

demo: deps
	@$(MAKE) --no-print-directory all
	@echo "demo: running scripts/quickstart.lua --yes (no terminal questions: every approval is given automatically)"
	@$(BUILD)/luarig scripts/quickstart.lua --yes </dev/null

clean:
	rm -rf build

# Runs each fuzz target for FUZZ_SECONDS on a scratch corpus under build/
# (seeded from tests/fuzz/corpus/NAME, which stays small and hand-made).
FUZZ_SECONDS ?= 60
fuzz-run: fuzz
	@for t in $(FUZZ_BIN); do \
		n=$$(basename $$t _fuzz); mkdir -p build/fuzz/corpus-$$n; \
		echo "== $$n"; $$t -max_total_time=$(FUZZ_SECONDS) build/fuzz/corpus-$$n tests/fuzz/corpus/$$n 2>&1 | tail -n 2; \
	done
