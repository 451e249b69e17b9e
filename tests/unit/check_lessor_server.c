/* lib/lessor/server: a graceful stop while connections keep arriving.
 *
 * libmicrohttpd 0.9.75 (Debian 12) aborts the process ("Failed to remove
 * listen FD from epoll set") when MHD_quiesce_daemon() races a polling
 * thread of an epoll daemon for the listening socket; lessor stopped that
 * way and died with SIGABRT about once per CI run.  This test stops many
 * servers while clients connect without pause, so that every polling thread
 * is awake at the moment of the stop. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lessor/server.h"
#include "testutil.h"
#include "util/fileio.h"
#include "log/log.h"

#define CHURNERS 3

/* The race's window is a few instructions wide; on a loaded machine a
 * preemption widens it.  This test widens it on purpose: libmicrohttpd's
 * calls to epoll_ctl() resolve to this definition (the executable's symbol
 * comes first), and a removal takes 200 us before the kernel sees it. */
int epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
	if (op == EPOLL_CTL_DEL)
		tu_sleep(200);
	return (int)syscall(SYS_epoll_ctl, epfd, op, fd, event);
}

struct churn {
	pthread_t thread;
	struct sockaddr_in addr;
	atomic_bool stop;
	unsigned long connects;
};

static int parse_address(const char *address, struct sockaddr_in *sa)
{
	const char *colon = strrchr(address, ':');
	char host[64];

	if (!colon || (size_t)(colon - address) >= sizeof(host))
		return -EINVAL;
	memcpy(host, address, (size_t)(colon - address));
	host[colon - address] = '\0';
	*sa = (struct sockaddr_in){.sin_family = AF_INET,
	                           .sin_port = htons((uint16_t)atoi(colon + 1))};
	return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -EINVAL;
}

/* Connect, send the start of a request, close: each wakes a polling thread. */
static void *churn_main(void *p)
{
	struct churn *c = p;

	while (!atomic_load(&c->stop)) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (fd < 0)
			break;
		if (connect(fd, (struct sockaddr *)&c->addr, sizeof(c->addr)) == 0)
			c->connects++;
		close(fd);
	}
	return NULL;
}

static void one_round(const char *dir, unsigned round, unsigned long *connects)
{
	struct lessor_server_config cfg = LESSOR_SERVER_CONFIG_DEFAULTS;
	struct churn churn[CHURNERS];
	lessor_server *s = NULL;
	char db[512];

	snprintf(db, sizeof(db), "%s/round-%u.db", dir, round);
	cfg.listen = "127.0.0.1:0";
	cfg.db_path = db;
	cfg.sync_full = false;
	cfg.threads = 32; /* one race window per polling thread */
	ck_assert_int_eq(lessor_server_start(&cfg, &s), 0);
	for (int i = 0; i < CHURNERS; i++) {
		churn[i] = (struct churn){.connects = 0};
		atomic_init(&churn[i].stop, false);
		ck_assert_int_eq(parse_address(lessor_server_address(s), &churn[i].addr), 0);
		ck_assert_int_eq(pthread_create(&churn[i].thread, NULL, churn_main, &churn[i]), 0);
	}
	tu_sleep(2 * USEC_PER_MSEC);
	s = lessor_server_stop(s); /* aborted here before the fix */
	for (int i = 0; i < CHURNERS; i++) {
		atomic_store(&churn[i].stop, true);
		pthread_join(churn[i].thread, NULL);
		*connects += churn[i].connects;
	}
}

START_TEST(test_stop_while_connections_arrive)
{
	char *dir = tu_tmpdir("lessor-server");
	unsigned long connects = 0;
	unsigned rounds = 50;
	const char *e = getenv("LESSOR_STOP_ROUNDS");

	if (e)
		rounds = (unsigned)atoi(e);
	log_set_max_level(LOG_WARNING); /* the drain warnings are expected */
	for (unsigned i = 0; i < rounds; i++)
		one_round(dir, i, &connects);
	ck_assert_uint_gt(connects, 0);
	rm_rf(dir);
	free(dir);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("lessor_server");
	TCase *tc = tcase_create("stop");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_stop_while_connections_arrive);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(suite());
}
