/* seccomp_wrap: run a program with io_uring forbidden, as container runtimes do.
 *
 *   seccomp_wrap --errno EPERM|ENOSYS [--syscall NAME]... -- PROG [ARGS...]
 *
 * Installs a seccomp filter (libseccomp; default action: allow; no_new_privs
 * set) under which io_uring_setup, io_uring_enter and io_uring_register fail
 * with the given errno, then executes PROG.  Docker's default profile answers
 * EPERM; runtimes whose profile predates io_uring (or a gVisor-like sandbox)
 * answer ENOSYS.  --syscall limits the filter to the named system calls (some
 * sandboxes allow io_uring_setup and refuse io_uring_enter).
 *
 * LESSEE_IO_BACKEND is removed from PROG's environment: a lessee started here
 * must notice by itself that io_uring is unusable and fall back to epoll.  The
 * filter is inherited across fork and exec, so a wrapper such as valgrind may
 * come after us in the command line. */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/macro.h"

#define EXIT_USAGE 2
#define MAX_SYSCALLS 8

static const char *const io_uring_syscalls[] = {"io_uring_setup", "io_uring_enter",
                                                "io_uring_register"};

static void usage(FILE *f)
{
	fprintf(f,
	        "Usage: seccomp_wrap --errno EPERM|ENOSYS [--syscall NAME]... -- PROG [ARGS...]\n"
	        "Run PROG with io_uring_setup, io_uring_enter and io_uring_register failing\n"
	        "with that errno (a seccomp filter; everything else allowed), and without\n"
	        "LESSEE_IO_BACKEND in its environment.\n\n"
	        "  --errno E      EPERM or ENOSYS (required)\n"
	        "  --syscall NAME only this io_uring system call (repeatable; default all three)\n"
	        "  -h, --help     this text\n"
	        "      --version  version\n");
}

static int parse_errno(const char *s)
{
	if (strcmp(s, "EPERM") == 0)
		return EPERM;
	if (strcmp(s, "ENOSYS") == 0)
		return ENOSYS;
	return -1;
}

static bool is_io_uring_syscall(const char *name)
{
	for (size_t i = 0; i < ELEMENTSOF(io_uring_syscalls); i++)
		if (strcmp(name, io_uring_syscalls[i]) == 0)
			return true;
	return false;
}

/* 0, or -errno from libseccomp (which returns negative errnos). */
static int install_filter(int err, const char *const *names, size_t n)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	int r;

	if (!ctx)
		return -ENOMEM;
	r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1);
	for (size_t i = 0; r >= 0 && i < n; i++) {
		int nr = seccomp_syscall_resolve_name(names[i]);

		r = nr == __NR_SCMP_ERROR
		        ? -ENOSYS
		        : seccomp_rule_add(ctx, SCMP_ACT_ERRNO((unsigned)err), nr, 0);
	}
	if (r >= 0)
		r = seccomp_load(ctx);
	seccomp_release(ctx);
	return r;
}

int main(int argc, char **argv)
{
	enum { O_ERRNO = 256, O_SYSCALL, O_VERSION };
	static const struct option longopts[] = {
	    {"errno", required_argument, NULL, O_ERRNO},
	    {"syscall", required_argument, NULL, O_SYSCALL},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, O_VERSION},
	    {0},
	};
	const char *names[MAX_SYSCALLS];
	size_t n = 0;
	int err = 0, c, r;

	/* "+": stop at the first non-option, PROG's options are PROG's. */
	while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) >= 0) {
		switch (c) {
		case O_ERRNO:
			err = parse_errno(optarg);
			if (err < 0) {
				fprintf(stderr,
				        "seccomp_wrap: --errno: '%s' is not EPERM or ENOSYS\n",
				        optarg);
				return EXIT_USAGE;
			}
			break;
		case O_SYSCALL:
			if (!is_io_uring_syscall(optarg) || n >= MAX_SYSCALLS) {
				fprintf(stderr,
				        "seccomp_wrap: --syscall: '%s' is not an io_uring "
				        "system call\n",
				        optarg);
				return EXIT_USAGE;
			}
			names[n++] = optarg;
			break;
		case 'h':
			usage(stdout);
			return EXIT_SUCCESS;
		case O_VERSION:
			printf("seccomp_wrap (lessee tests) %s\n", LESSEE_VERSION);
			return EXIT_SUCCESS;
		default:
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (err == 0 || optind >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (n == 0)
		for (size_t i = 0; i < ELEMENTSOF(io_uring_syscalls); i++)
			names[n++] = io_uring_syscalls[i];
	r = install_filter(err, names, n);
	if (r < 0) {
		fprintf(stderr, "seccomp_wrap: cannot install the filter: %s\n", strerror(-r));
		return EXIT_FAILURE;
	}
	unsetenv("LESSEE_IO_BACKEND");
	execvp(argv[optind], argv + optind);
	fprintf(stderr, "seccomp_wrap: %s: %s\n", argv[optind], strerror(errno));
	return 127;
}
