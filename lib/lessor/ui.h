/* The dashboard's static files (lib/lessor/ui/), embedded in the binary at
 * build time (the Makefile generates the table from the files). */
#pragma once

#include <stddef.h>

struct lessor_ui_file {
	const char *name; /* "index.html", "app.js", ... */
	const unsigned char *data;
	size_t len;
};

/* Terminated by an entry with name NULL. */
extern const struct lessor_ui_file lessor_ui_files[];

/* The file a path under /ui names ("/ui" and "/ui/" are index.html), or NULL. */
const struct lessor_ui_file *lessor_ui_lookup(const char *path);
/* The Content-Type of a file name by its extension. */
const char *lessor_ui_content_type(const char *name);
