/* WAL checkpoints off the request path.  SQLite's automatic checkpoint runs
 * in the thread whose COMMIT took the WAL past wal_autocheckpoint pages: about
 * one write in a hundred (a claim, a completion) then copied the WAL back into
 * the database file and synced it before its answer could go, milliseconds
 * that were the tail of enqueue -> start.  Here the connection's WAL hook
 * (which replaces the automatic checkpoint) only wakes a thread of ours; that
 * thread runs a PASSIVE checkpoint on a connection of its own, which never
 * takes the write lock, so writers go on meanwhile.  The WAL restarts from its
 * start only at a write that finds it all copied, which writers coming all the
 * time would never let happen: so the next writer after the thread's
 * checkpoint copies the few frames written meanwhile itself, a short pause
 * instead of the whole copy.  Should the thread fall far behind (a very slow
 * disk), the writer checkpoints itself, as SQLite did, so the WAL stays
 * bounded. */
#include <errno.h>
#include <stdlib.h>

#include "lessor/store_sqlite-int.h"
#include "log/log.h"
#include "util/macro.h"

#define CKPT_FRAMES_DEFAULT 1000 /* SQLite's own wal_autocheckpoint */
#define CKPT_INLINE_FACTOR 8     /* times that, past which the writer checkpoints */

struct lessor_ckpt {
	sqlite3 *db; /* the thread's own connection */
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool wanted, stop, thread_started;
	bool busy;            /* the thread is checkpointing: no new request until it is done
	                       * and a writer caught up, or the two would keep each other from
	                       * restarting the WAL */
	atomic_bool catch_up; /* the thread checkpointed: a writer copies the rest */
	int frames;           /* a checkpoint is asked for at this many WAL frames */
	bool failed_logged;
};

static bool ckpt_run(lessor_sqlite *s, sqlite3 *db, atomic_uint_fast64_t *counter)
{
	struct lessor_ckpt *c = s->ckpt;
	int rc = sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);

	if (rc == SQLITE_OK) {
		if (counter)
			atomic_fetch_add(counter, 1);
		return true;
	}
	if (rc != SQLITE_BUSY && !c->failed_logged) {
		c->failed_logged = true;
		log_warning("WAL checkpoint failed: %s (the WAL grows until one succeeds)",
		            sqlite3_errmsg(db));
	}
	return false;
}

static void *ckpt_main(void *userdata)
{
	lessor_sqlite *s = userdata;
	struct lessor_ckpt *c = s->ckpt;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		while (!c->wanted && !c->stop)
			pthread_cond_wait(&c->cond, &c->lock);
		if (c->stop)
			break;
		c->wanted = false;
		c->busy = true;
		pthread_mutex_unlock(&c->lock);
		if (ckpt_run(s, c->db, &s->checkpoints))
			atomic_store(&c->catch_up, true);
		pthread_mutex_lock(&c->lock);
		c->busy = false;
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* After each COMMIT, in the writer's thread, with the write lock released. */
static int on_wal(void *userdata, sqlite3 *db, const char *name, int frames)
{
	lessor_sqlite *s = userdata;
	struct lessor_ckpt *c = s->ckpt;

	(void)name;
	if (atomic_exchange(&c->catch_up, false)) {
		(void)ckpt_run(s, db, NULL);
		return SQLITE_OK;
	}
	if (frames < c->frames)
		return SQLITE_OK;
	if (frames >= c->frames * CKPT_INLINE_FACTOR) {
		ckpt_run(s, db, &s->checkpoints_inline);
		return SQLITE_OK;
	}
	pthread_mutex_lock(&c->lock);
	if (!c->busy) {
		c->wanted = true;
		pthread_cond_signal(&c->cond);
	}
	pthread_mutex_unlock(&c->lock);
	return SQLITE_OK;
}

static int ckpt_open(lessor_sqlite *s, const char *path, struct lessor_ckpt *c)
{
	int rc = sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
	char *err = NULL;

	if (rc == SQLITE_OK)
		rc = sqlite3_exec(c->db,
		                  s->cfg.sync_full ? "PRAGMA synchronous = FULL"
		                                   : "PRAGMA synchronous = NORMAL",
		                  NULL, NULL, &err);
	if (rc != SQLITE_OK) {
		log_error("cannot open the checkpoint connection to %s: %s", path,
		          err     ? err
		          : c->db ? sqlite3_errmsg(c->db)
		                  : sqlite3_errstr(rc));
		sqlite3_free(err);
		return -EIO;
	}
	return 0;
}

int lessor_ckpt_start(lessor_sqlite *s, const char *path)
{
	struct lessor_ckpt *c = calloc(1, sizeof(*c));
	int r;

	if (!c)
		return -ENOMEM;
	s->ckpt = c;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	c->frames = s->cfg.checkpoint_frames ? (int)s->cfg.checkpoint_frames : CKPT_FRAMES_DEFAULT;
	r = ckpt_open(s, path, c);
	if (r < 0)
		return r;
	r = -pthread_create(&c->thread, NULL, ckpt_main, s);
	if (r < 0)
		return r;
	c->thread_started = true;
	sqlite3_wal_hook(s->db, on_wal, s);
	return 0;
}

void lessor_ckpt_stop(lessor_sqlite *s)
{
	struct lessor_ckpt *c = s->ckpt;

	if (!c)
		return;
	if (s->db)
		sqlite3_wal_hook(s->db, NULL, NULL);
	if (c->thread_started) {
		pthread_mutex_lock(&c->lock);
		c->stop = true;
		pthread_cond_signal(&c->cond);
		pthread_mutex_unlock(&c->lock);
		pthread_join(c->thread, NULL);
	}
	sqlite3_close(c->db);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->cond);
	free(c);
	s->ckpt = NULL;
}
