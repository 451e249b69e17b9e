# lessee + lessor.  GNU make.
#
#   make                 build lessee and lessor (installs missing Debian deps as root)
#   make check           build and run the whole test suite under both loop backends
#   make demo            lessor + lessee working real runs on a temporary database
#   make bench           build the benchmarks (run them from build/*/bench/)
#   make install         PREFIX=/usr/local DESTDIR=
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
UNITDIR    ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
DESTDIR    ?=

VERSION    := 0.1.0
CC         ?= cc
PKG_CONFIG ?= pkg-config

VARIANT    := $(if $(FUZZ),fuzz,$(if $(SANITIZE),san,$(if $(COVERAGE),cov,default)))
BUILD      ?= build/$(VARIANT)

LESSEE_PKGS := libcurl liburing libcjson libsystemd libmicrohttpd
LESSOR_PKGS := libmicrohttpd sqlite3 libcjson libcurl libsystemd
TEST_PKGS   := check libseccomp yaml-0.1

# pkg-config runs once, lazily: after `deps` has had a chance to install things.
lazy = $(eval $1 := $$(shell $(PKG_CONFIG) $2 $3 2>/dev/null))$($1)
PKG_CFLAGS = $(call lazy,PKG_CFLAGS,--cflags,$(sort $(LESSEE_PKGS) $(LESSOR_PKGS) $(TEST_PKGS)))
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
LESSOR_OBJ := $(call obj,$(LESSOR_SRC))
HELPER_OBJ := $(call obj,$(HELPER_SRC))

LIBLESSEE := $(BUILD)/liblessee.a
LIBLESSOR := $(BUILD)/liblessor.a
LESSEE    := $(BUILD)/lessee
LESSOR    := $(BUILD)/lessor
TESTS     := $(patsubst %.c,$(BUILD)/%,$(TEST_SRC))
BENCHES   := $(patsubst %.c,$(BUILD)/%,$(BENCH_SRC))
TEST_AUX  := $(patsubst %.c,$(BUILD)/%,$(wildcard tests/aux/*.c))

# `make V=1` shows full command lines.
Q := $(if $(filter 1,$(V)),,@)
say = $(if $(Q),@printf '  %-6s %s\n' $1 $2)

.PHONY: all deps deps-test build check check-build demo bench install clean valgrind-check \
	check-systemd format fuzz fuzz-build fuzz-short
.DEFAULT_GOAL := all

all: deps
	@$(MAKE) --no-print-directory build

deps:
	@scripts/deps.sh build

build: $(LESSEE) $(LESSOR)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(call say,CC,$<)
	$(Q)$(CC) $(ALL_CFLAGS) -c -o $@ $<

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
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LESSEE_LIBS)

$(LESSOR): $(call obj,$(wildcard cmd/lessor/*.c)) $(LIBLESSOR) $(LIBLESSEE)
	$(call say,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LESSOR_LIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(HELPER_OBJ) $(LIBLESSOR) $(LIBLESSEE)
	$(call say,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(TEST_LIBS) -lm

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(HELPER_OBJ) $(LIBLESSOR) $(LIBLESSEE)
	$(call say,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(TEST_LIBS) -lm

check-build: $(LESSEE) $(LESSOR) $(TESTS) $(TEST_AUX)

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

# lessee under a real systemd in a container, as `make install` puts it
# (tests/systemd/run.sh, docs/systemd.md).  Root; slow the first time.
SYSTEMD_STAGE = $(abspath $(BUILD))/systemd-stage
check-systemd:
	@scripts/deps.sh test systemd
	@rm -rf $(SYSTEMD_STAGE)
	@$(MAKE) --no-print-directory install DESTDIR=$(SYSTEMD_STAGE) PREFIX=/usr/local \
		SYSCONFDIR=/etc >/dev/null
	@BUILD=$(BUILD) STAGE=$(SYSTEMD_STAGE) tests/systemd/run.sh

demo:
	@scripts/deps.sh build
	@$(MAKE) --no-print-directory build
	@BUILD=$(BUILD) scripts/demo.sh

bench:
	@scripts/deps.sh test
	@$(MAKE) --no-print-directory build $(BENCHES)

install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SYSCONFDIR)/lessee $(DESTDIR)$(UNITDIR) \
		$(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(TMPFILESDIR) \
		$(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8
	install -m 0755 $(LESSEE) $(LESSOR) $(DESTDIR)$(BINDIR)/
	[ -e $(DESTDIR)$(SYSCONFDIR)/lessee/lessee.conf ] || \
		install -m 0644 conf/lessee.conf $(DESTDIR)$(SYSCONFDIR)/lessee/lessee.conf
	# the units name the installed paths, whatever PREFIX and SYSCONFDIR are
	for f in systemd/*.service; do \
		sed -e 's|/usr/local/bin/|$(BINDIR)/|g' -e 's|/etc/lessee/|$(SYSCONFDIR)/lessee/|g' \
			-e 's|/etc/lessor/|$(SYSCONFDIR)/lessor/|g' "$$f" \
			>$(DESTDIR)$(UNITDIR)/$${f#systemd/} && chmod 0644 $(DESTDIR)$(UNITDIR)/$${f#systemd/}; \
	done
	install -m 0644 systemd/lessee.sysusers $(DESTDIR)$(SYSUSERSDIR)/lessee.conf
	install -m 0644 systemd/lessee.tmpfiles $(DESTDIR)$(TMPFILESDIR)/lessee.conf
	install -m 0644 docs/man/*.5 $(DESTDIR)$(MANDIR)/man5/
	install -m 0644 docs/man/*.8 $(DESTDIR)$(MANDIR)/man8/

format:
	clang-format -i $(wildcard lib/*/*.[ch] cmd/*/*.c tests/*/*.[ch] bench/*.c fuzz/*.[ch])

clean:
	rm -rf build

-include $(shell find $(BUILD) -name '*.d' -type f 2>/dev/null)
