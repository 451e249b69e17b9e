# lessee + lessor.  GNU make.
#
#   make                 build lessee and lessor (never installs packages: see make deps)
#   make deps            install the missing Debian build packages (root; else prints the command)
#   make check           build and run the whole test suite under both loop backends
#   make demo            lessor + lessee working real runs on a temporary database
#                        (PROTOCOL=conductor: lessee against the Conductor emulator)
#   make bench           build the benchmarks (run them from build/*/bench/)
#   make chaos           lessor + three lessees + thousands of runs under faults (10-20 min)
#   make chaos-short     the same, small (a few minutes; .ci/run runs it)
#   make install         PREFIX=/usr/local DESTDIR=  (daemons in $(SBINDIR); builds, installs no package)
#   make uninstall       the same variables: removes what install put, but the configuration
#   make deb             $(BUILD)/deb/lessee_$(VERSION)-1_ARCH.deb: dpkg-buildpackage (debian/), lintian
#   make check-deb       that .deb installed in the systemd-nspawn container, run as a service
#   make bench-report    runs the benchmarks behind docs/performance.md, plots them
#                        (gnuplot) into docs/performance/ and rewrites the doc's
#                        generated parts; QUICK=1: small counts, a few minutes
#   make bench-compare   also graphile-worker and pg-boss for bench/lessor_pg, the
#                        Conductor JS SDK for bench/conductor_peers and the Camunda 7
#                        JS client for bench/camunda7_peers (npm)
#   make WERROR=1 SANITIZE=address,undefined check
#   make fuzz            every libFuzzer harness (fuzz/*.c, clang, ASan+UBSan) for
#                        FUZZ_TIME seconds each (default 60); make fuzz-short: 10 s
#
# Objects go to build/<variant>/ so a sanitizer build never mixes with a plain one.

PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
SBINDIR    ?= $(PREFIX)/sbin
SYSCONFDIR ?= /etc
MANDIR     ?= $(PREFIX)/share/man
DOCDIR     ?= $(PREFIX)/share/doc/lessee
DESTDIR    ?=

# The one place the version is written: -DLESSEE_VERSION, and debian/changelog
# must agree (check_packaging holds them together).
VERSION    := 0.1.0
CC         ?= cc
PKG_CONFIG ?= pkg-config

# systemd's directories from systemd.pc: as it says for PREFIX=/usr (the
# system's own, /lib/systemd/system on Debian 12), relocated under any other
# PREFIX; $(PREFIX)/lib/... when systemd.pc is not installed.
systemd_dir = $(or $(shell $(PKG_CONFIG) $(if $(filter /usr,$(PREFIX)),,--define-variable=prefix=$(PREFIX) \
	--define-variable=root_prefix=$(PREFIX)) --variable=$1 systemd 2>/dev/null),$(PREFIX)/lib/$2)
UNITDIR     ?= $(call systemd_dir,systemdsystemunitdir,systemd/system)
SYSUSERSDIR ?= $(call systemd_dir,sysusersdir,sysusers.d)
TMPFILESDIR ?= $(call systemd_dir,tmpfilesdir,tmpfiles.d)

VARIANT    := $(if $(FUZZ),fuzz,$(if $(SANITIZE),san,$(if $(COVERAGE),cov,default)))
BUILD      ?= build/$(VARIANT)

LESSEE_PKGS := libcurl liburing libcjson libsystemd libmicrohttpd
LESSOR_PKGS := libmicrohttpd sqlite3 libpq libcjson libcurl libsystemd
TEST_PKGS   := check libseccomp yaml-0.1 fuse3

# pkg-config runs once, lazily: after `deps` has had a chance to install things.
lazy = $(eval $1 := $$(shell $(PKG_CONFIG) $2 $3 2>/dev/null))$($1)
# Compiler flags one package at a time: `make deps` installs the build
# packages only, and a test package not there yet must not take every other
# package's flags with it (pkg-config prints nothing when one is missing).
pkg_each = $(foreach p,$2,$(shell $(PKG_CONFIG) $1 $p 2>/dev/null))
PKG_CFLAGS = $(eval PKG_CFLAGS := $$(sort $$(call pkg_each,--cflags,$(sort $(LESSEE_PKGS) $(LESSOR_PKGS) $(TEST_PKGS)))))$(PKG_CFLAGS)
LESSEE_LIBS = $(call lazy,LESSEE_LIBS,--libs,$(LESSEE_PKGS))
LESSOR_LIBS = $(call lazy,LESSOR_LIBS,--libs,$(LESSOR_PKGS))
TEST_LIBS = $(call lazy,TEST_LIBS,--libs,$(sort $(LESSEE_PKGS) $(LESSOR_PKGS) $(TEST_PKGS)))

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wcast-qual \
	-Werror=implicit-function-declaration -Wno-unused-parameter -Wformat=2 \
	-Wno-format-nonliteral
OPT       ?= -O2
CFLAGS    ?= $(OPT) -g
ALL_CFLAGS = -std=gnu11 $(WARN) $(if $(filter 1,$(WERROR)),-Werror) \
	-D_GNU_SOURCE -DLESSEE_VERSION='"$(VERSION)"' -Ilib -Itests/helpers \
	$(if $(SANITIZE),-fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all) \
	$(if $(COVERAGE),--coverage) $(if $(FUZZ),$(FUZZ_CFLAGS)) \
	-MMD -MP $(PKG_CFLAGS) $(CFLAGS) $(CPPFLAGS)
ALL_LDFLAGS = $(if $(SANITIZE),-fsanitize=$(SANITIZE)) $(if $(COVERAGE),--coverage) $(LDFLAGS)

# `make fuzz` builds everything again with clang under build/fuzz (FUZZ=1):
# the libraries instrumented for libFuzzer, each fuzz/<name>.c linked with its
# main.  The normal build compiles the same harnesses into check_fuzz_regress.
FUZZ_CFLAGS = -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all \
	-fno-omit-frame-pointer -DLESSEE_LIBFUZZER
FUZZ_SRC   := $(wildcard fuzz/*.c)
FUZZ_NAMES := $(basename $(notdir $(FUZZ_SRC)))
FUZZ_TIME  ?= 60

# Every lib/<module>/*.c is part of liblessee.a, except lib/lessor (liblessor.a).
LESSOR_SRC := $(wildcard lib/lessor/*.c)
LIB_SRC    := $(filter-out $(LESSOR_SRC),$(wildcard lib/*/*.c))
HELPER_SRC := $(wildcard tests/helpers/*.c)
TEST_SRC   := $(wildcard tests/unit/check_*.c tests/integration/check_*.c)
BENCH_SRC  := $(wildcard bench/*.c)

obj = $(patsubst %.c,$(BUILD)/%.o,$1)
LIB_OBJ    := $(call obj,$(LIB_SRC))
# The dashboard's files (lib/lessor/ui/) become a C table in the binary.
UI_FILES   := $(sort $(wildcard lib/lessor/ui/*))
UI_GEN     := $(BUILD)/gen/lessor_ui_files.c
LESSOR_OBJ := $(call obj,$(LESSOR_SRC)) $(BUILD)/gen/lessor_ui_files.o
HELPER_OBJ := $(call obj,$(HELPER_SRC))

LIBLESSEE := $(BUILD)/liblessee.a
LIBLESSOR := $(BUILD)/liblessor.a
LESSEE    := $(BUILD)/lessee
LESSOR    := $(BUILD)/lessor
TESTS     := $(patsubst %.c,$(BUILD)/%,$(TEST_SRC))
BENCHES   := $(patsubst %.c,$(BUILD)/%,$(BENCH_SRC))
# tests/chaos/chaos.c: not a check_* test, so `make check` does not run it.
CHAOS     := $(BUILD)/tests/chaos/chaos
# tests/conductor/conductor_emu: an emulation of Conductor's task API (docs/conductor.md);
# tests/camunda7/camunda7_emu: of the Camunda 7 external-task REST API.
TEST_AUX  := $(patsubst %.c,$(BUILD)/%,$(wildcard tests/aux/*.c tests/conductor/*.c \
	tests/camunda7/*.c))

# `make V=1` shows full command lines.
Q := $(if $(filter 1,$(V)),,@)
say = $(if $(Q),@printf '  %-6s %s\n' $1 $2)

.PHONY: all deps build check check-build demo bench bench-compare bench-report install uninstall clean \
	valgrind-check check-systemd check-deb deb format chaos chaos-short fuzz fuzz-build fuzz-short
.DEFAULT_GOAL := all

# Goals given together are made in the order given, one after another: some
# recipes (bench, chaos, demo) run a make of their own, and with -j that make
# would build the same objects as its neighbour at the same time.  Each goal
# waits for the one before it (an order-only prerequisite: the prerequisites
# of a goal are still made beside the goal before it, only its recipe waits).
# At every level, so that a make started from a recipe or a script under make
# (MAKELEVEL > 0) orders its goals too.  A goal that one before it needs only
# gets make's "Circular ... dependency dropped" warning.
goal_chain = $(if $(word 2,$1),$(if $(filter-out $(word 1,$1),$(word 2,$1)), \
	$(eval $(word 2,$1): | $(word 1,$1)))$(call goal_chain,$(wordlist 2,$(words $1),$1)))
$(call goal_chain,$(MAKECMDGOALS))

# Building never installs packages: `make deps` does (the targets that run
# things on a fresh machine, check and demo, call it themselves).
all: build

deps:
	@scripts/deps.sh build

build: $(LESSEE) $(LESSOR)

# Missing -dev packages: say so once, before the compiler does in its own words.
.PHONY: pkgs-present
pkgs-present:
	@$(PKG_CONFIG) --exists $(sort $(LESSEE_PKGS) $(LESSOR_PKGS)) 2>/dev/null || { \
		echo "make: missing build packages ($(sort $(LESSEE_PKGS) $(LESSOR_PKGS)));" \
			"run make deps (as root it installs them, else it prints the command)" >&2; \
		exit 1; }

$(BUILD)/%.o: %.c | pkgs-present
	@mkdir -p $(@D)
	$(call say,CC,$<)
	$(Q)$(CC) $(ALL_CFLAGS) -c -o $@ $<

# od and sed only (no xxd): one byte array per file, then the table.
$(UI_GEN): $(UI_FILES) Makefile
	@mkdir -p $(@D)
	$(call say,GEN,$@)
	$(Q){ echo '#include "lessor/ui.h"'; i=0; \
	  for f in $(UI_FILES); do \
	    echo "static const unsigned char f$$i[] = {"; \
	    od -An -v -tx1 "$$f" | sed -e 's/ *\([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	    echo "};"; i=$$((i + 1)); \
	  done; \
	  echo 'const struct lessor_ui_file lessor_ui_files[] = {'; i=0; \
	  for f in $(UI_FILES); do \
	    echo "{\"$${f##*/}\", f$$i, sizeof(f$$i)},"; i=$$((i + 1)); \
	  done; \
	  echo '{0}};'; } >$@.tmp && mv $@.tmp $@

$(BUILD)/gen/lessor_ui_files.o: $(UI_GEN)
	$(call say,CC,$<)
	$(Q)$(CC) $(ALL_CFLAGS) -Wno-missing-prototypes -c -o $@ $<

$(LIBLESSEE): $(LIB_OBJ)
	@mkdir -p $(@D)
	@rm -f $@
	$(call say,AR,$@)
	$(Q)$(AR) rcs $@ $^

$(LIBLESSOR): $(LESSOR_OBJ)
	@mkdir -p $(@D)
	@rm -f $@
	$(call say,AR,$@)
	$(Q)$(AR) rcs $@ $^

$(LESSEE): $(call obj,$(wildcard cmd/lessee/*.c)) $(LIBLESSEE)
	$(call say,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LESSEE_LIBS) -lm

$(LESSOR): $(call obj,$(wildcard cmd/lessor/*.c)) $(LIBLESSOR) $(LIBLESSEE)
	$(call say,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LESSOR_LIBS) -lm

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(HELPER_OBJ) $(LIBLESSOR) $(LIBLESSEE)
	$(call say,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(TEST_LIBS) -lm

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(HELPER_OBJ) $(LIBLESSOR) $(LIBLESSEE)
	$(call say,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(TEST_LIBS) -lm

# The benches and chaos too: check_packaging asks every program for --version
# and --help.
check-build: $(LESSEE) $(LESSOR) $(TESTS) $(TEST_AUX) $(BENCHES) $(CHAOS)

# The Conductor emulator links only what lessee does (libmicrohttpd, cJSON),
# so `make demo PROTOCOL=conductor` needs no test package.
CONDUCTOR_EMU := $(BUILD)/tests/conductor/conductor_emu
$(CONDUCTOR_EMU): $(BUILD)/tests/conductor/conductor_emu.o $(LIBLESSEE)
	$(call say,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LESSEE_LIBS) -lm
# The same for the Camunda 7 emulator (make demo PROTOCOL=camunda7).
CAMUNDA7_EMU := $(BUILD)/tests/camunda7/camunda7_emu
$(CAMUNDA7_EMU): $(BUILD)/tests/camunda7/camunda7_emu.o $(LIBLESSEE)
	$(call say,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LESSEE_LIBS) -lm

# The regression test replays fuzz/corpus/ and fuzz/regress/ through the harnesses.
$(BUILD)/tests/unit/check_fuzz_regress: $(BUILD)/tests/unit/check_fuzz_regress.o \
		$(call obj,$(FUZZ_SRC)) $(HELPER_OBJ) $(LIBLESSOR) $(LIBLESSEE)
	$(call say,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(TEST_LIBS) -lm

$(BUILD)/fuzzers/%: $(BUILD)/fuzz/%.o $(LIBLESSOR) $(LIBLESSEE)
	@mkdir -p $(@D)
	$(call say,LD,$@)
	$(Q)$(CC) -fsanitize=fuzzer,address,undefined $(LDFLAGS) -o $@ $^ $(TEST_LIBS) -lm

fuzz-build: $(addprefix $(BUILD)/fuzzers/,$(FUZZ_NAMES))

# Each harness for FUZZ_TIME seconds, one at a time; fails on the first crash.
fuzz:
	@scripts/deps.sh build fuzz
	@$(MAKE) --no-print-directory FUZZ=1 CC=clang BUILD=build/fuzz fuzz-build
	@FUZZ_TIME=$(FUZZ_TIME) BUILD=build/fuzz scripts/fuzz.sh $(FUZZ_NAMES)

fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZ_TIME=10

# The suite runs twice, once per loop backend (tests/run.sh).  T=name filters.
check:
	@scripts/deps.sh test
	@$(MAKE) --no-print-directory check-build
	@BUILD=$(BUILD) tests/run.sh $(T)

valgrind-check:
	@scripts/deps.sh test
	@$(MAKE) --no-print-directory check-build
	@BUILD=$(BUILD) VALGRIND=1 tests/run.sh $(T)

# tests/chaos/chaos.c; its parameters are environment variables (see there).
CHAOS_RUNS   ?= 3000
CHAOS_WINDOW ?= 600
chaos:
	@scripts/deps.sh test
	@$(MAKE) --no-print-directory $(LESSEE) $(LESSOR) $(TEST_AUX) $(CHAOS)
	@LESSEE_BIN=$(abspath $(LESSEE)) LESSOR_BIN=$(abspath $(LESSOR)) \
		LESSEE_TEST_AUX=$(abspath $(BUILD))/tests/aux LESSEE_SRCDIR=$(CURDIR) \
		CHAOS_RUNS=$(CHAOS_RUNS) CHAOS_WINDOW=$(CHAOS_WINDOW) $(CHAOS)

chaos-short:
	@$(MAKE) --no-print-directory chaos CHAOS_RUNS=300 CHAOS_WINDOW=60

# lessee under a real systemd in a container, as `make install` puts it
# (tests/systemd/run.sh, docs/systemd.md).  Root; slow the first time.
SYSTEMD_STAGE = $(abspath $(BUILD))/systemd-stage
check-systemd:
	@scripts/deps.sh test systemd
	@rm -rf $(SYSTEMD_STAGE)
	@$(MAKE) --no-print-directory install DESTDIR=$(SYSTEMD_STAGE) PREFIX=/usr/local \
		SYSCONFDIR=/etc >/dev/null
	@BUILD=$(BUILD) STAGE=$(SYSTEMD_STAGE) tests/systemd/run.sh

# make deb's package installed with dpkg in the same container, lessor and
# lessee run from it as its services (tests/systemd/deb-suite.sh).  Root.
check-deb:
	@scripts/deps.sh build systemd deb
	@$(MAKE) --no-print-directory deb >$(abspath $(BUILD))/deb.log 2>&1 || \
		{ tail -n 30 $(abspath $(BUILD))/deb.log; exit 1; }
	@grep -E '^(lintian|deb):|^[EWIN]: ' $(abspath $(BUILD))/deb.log | grep -v '^N: ' || true
	@BUILD=$(BUILD) DEB=$(DEB) tests/systemd/run.sh

# PROTOCOL=conductor: the same tour against the Conductor emulator
# (scripts/demo_conductor.sh, docs/conductor.md); PROTOCOL=camunda7 against
# the Camunda 7 emulator (scripts/demo_camunda7.sh, docs/camunda7.md).
PROTOCOL ?= native
demo:
	@scripts/deps.sh build
	@$(MAKE) --no-print-directory build $(if $(filter conductor,$(PROTOCOL)),$(CONDUCTOR_EMU)) \
		$(if $(filter camunda7,$(PROTOCOL)),$(CAMUNDA7_EMU))
	@BUILD=$(BUILD) PROTOCOL=$(PROTOCOL) scripts/demo.sh

bench:
	@scripts/deps.sh test
	@$(MAKE) --no-print-directory build $(BENCHES) $(CONDUCTOR_EMU) $(CAMUNDA7_EMU)

# graphile-worker and pg-boss beside lessor in bench/lessor_pg, and the official
# Conductor and Camunda 7 workers beside lessee in bench/conductor_peers and
# bench/camunda7_peers (needs node >= 20 and npm)
bench-compare: bench
	@mkdir -p $(BUILD)/bench/compare
	@cp bench/compare/package.json bench/compare/queues.mjs bench/compare/graphile_spawn.mjs \
		$(BUILD)/bench/compare/
	@cd $(BUILD)/bench/compare && npm install --no-audit --no-fund --silent
	@mkdir -p $(BUILD)/bench/conductor-sdk
	@cp tests/conductor/sdk/package.json tests/conductor/sdk/package-lock.json \
		tests/conductor/sdk/.npmrc tests/conductor/sdk/worker.mjs $(BUILD)/bench/conductor-sdk/
	@cd $(BUILD)/bench/conductor-sdk && npm ci --no-audit --no-fund --silent
	@mkdir -p $(BUILD)/bench/camunda7-sdk
	@cp tests/camunda7/sdk/package.json tests/camunda7/sdk/package-lock.json \
		tests/camunda7/sdk/.npmrc tests/camunda7/sdk/worker.mjs $(BUILD)/bench/camunda7-sdk/
	@cd $(BUILD)/bench/camunda7-sdk && npm ci --no-audit --no-fund --silent

# scripts/bench_report.sh: the TSVs in build/bench-report/, the plots in
# docs/performance/, the generated parts of docs/performance.md.
bench-report: bench-compare
	@scripts/deps.sh bench
	@BUILD=$(BUILD) QUICK=$(QUICK) scripts/bench_report.sh

# Installed: the daemons (section 8) in $(SBINDIR), units, sysusers/tmpfiles,
# man pages, docs/ in $(DOCDIR), and lessee.conf unless one is there already.
# The units and man pages are rewritten to name the installed paths.
UNITS     := $(notdir $(wildcard systemd/*.service))
MANPAGES  := $(wildcard docs/man/*.[1-8])
DOCS      := $(wildcard docs/*.md docs/*.yaml) README.md
install_sed = -e 's|/usr/local/sbin/|$(SBINDIR)/|g' -e 's|/etc/lessee/|$(SYSCONFDIR)/lessee/|g' \
	-e 's|/etc/lessor/|$(SYSCONFDIR)/lessor/|g' -e 's|/usr/share/doc/lessee/|$(DOCDIR)/|g'

install: build
	install -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(SYSCONFDIR)/lessee $(DESTDIR)$(UNITDIR) \
		$(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(TMPFILESDIR) $(DESTDIR)$(DOCDIR) \
		$(sort $(patsubst .%,$(DESTDIR)$(MANDIR)/man%,$(suffix $(MANPAGES))))
	install -m 0755 $(LESSEE) $(LESSOR) $(DESTDIR)$(SBINDIR)/
	[ -e $(DESTDIR)$(SYSCONFDIR)/lessee/lessee.conf ] || \
		install -m 0644 conf/lessee.conf $(DESTDIR)$(SYSCONFDIR)/lessee/lessee.conf
	for f in $(UNITS); do \
		sed $(install_sed) systemd/$$f >$(DESTDIR)$(UNITDIR)/$$f && \
			chmod 0644 $(DESTDIR)$(UNITDIR)/$$f || exit 1; \
	done
	install -m 0644 systemd/lessee.sysusers $(DESTDIR)$(SYSUSERSDIR)/lessee.conf
	install -m 0644 systemd/lessee.tmpfiles $(DESTDIR)$(TMPFILESDIR)/lessee.conf
	for f in $(MANPAGES); do \
		s=$${f##*.}; sed $(install_sed) $$f >$(DESTDIR)$(MANDIR)/man$$s/$${f##*/} && \
			chmod 0644 $(DESTDIR)$(MANDIR)/man$$s/$${f##*/} || exit 1; \
	done
	install -m 0644 $(DOCS) $(DESTDIR)$(DOCDIR)/

# Everything install put, but $(SYSCONFDIR)/lessee (the operator's configuration);
# also the daemons in $(BINDIR), where earlier installs put them.
uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/lessee $(DESTDIR)$(SBINDIR)/lessor \
		$(DESTDIR)$(BINDIR)/lessee $(DESTDIR)$(BINDIR)/lessor \
		$(addprefix $(DESTDIR)$(UNITDIR)/,$(UNITS)) \
		$(DESTDIR)$(SYSUSERSDIR)/lessee.conf $(DESTDIR)$(TMPFILESDIR)/lessee.conf \
		$(foreach f,$(MANPAGES),$(DESTDIR)$(MANDIR)/man$(patsubst .%,%,$(suffix $f))/$(notdir $f)) \
		$(addprefix $(DESTDIR)$(DOCDIR)/,$(notdir $(DOCS)))
	-rmdir $(DESTDIR)$(DOCDIR) 2>/dev/null

# A Debian package of this tree (debian/), built the Debian way in a copy of
# it under $(DEB_DIR) (dpkg-buildpackage cleans its tree and writes to ..);
# lintian must find no error or warning (debian/lessee.lintian-overrides
# explains each override).
DEB_DIR = $(abspath $(BUILD))/deb
DEB_ARCH = $(shell dpkg --print-architecture 2>/dev/null)
DEB      = $(DEB_DIR)/lessee_$(shell dpkg-parsechangelog -S Version 2>/dev/null)_$(DEB_ARCH).deb
deb:
	@scripts/deps.sh build deb
	rm -rf $(DEB_DIR) && mkdir -p $(DEB_DIR)/lessee-$(VERSION)
	tar -c --exclude=./build --exclude=./.git --exclude='./.*.swp' . | \
		tar -x -C $(DEB_DIR)/lessee-$(VERSION)
	cd $(DEB_DIR)/lessee-$(VERSION) && dpkg-buildpackage -us -uc -b
	lintian --fail-on error,warning --info $(DEB_DIR)/lessee_*_$(DEB_ARCH).changes
	@echo "lintian: no error or warning (overrides explained in debian/lessee.lintian-overrides)"
	@echo "deb: $(DEB)"

format:
	clang-format -i $(wildcard lib/*/*.[ch] cmd/*/*.c tests/*/*.[ch] bench/*.c fuzz/*.[ch])

clean:
	rm -rf build

-include $(shell find $(BUILD) -name '*.d' -type f 2>/dev/null)
