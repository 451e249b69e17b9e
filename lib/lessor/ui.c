/* GET /ui: the dashboard.  Static files only: they hold no data and are
 * served without a token; the page asks for the admin token and sends it as
 * Bearer on its fetch() calls to the admin API, like any other client. */
#include "lessor/ui.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lessor/api-int.h"
#include "util/strutil.h"

/* Scripts and styles only from the files below: no inline script, no eval,
 * no other origin, no framing. */
#define UI_CSP                                                                                     \
	"default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; "        \
	"object-src 'none'"

const struct lessor_ui_file *lessor_ui_lookup(const char *path)
{
	const char *name;

	if (streq(path, "/ui") || streq(path, "/ui/"))
		name = "index.html";
	else if (strncmp(path, "/ui/", 4) == 0)
		name = path + 4;
	else
		return NULL;
	for (const struct lessor_ui_file *f = lessor_ui_files; f->name; f++)
		if (streq(f->name, name))
			return f;
	return NULL;
}

const char *lessor_ui_content_type(const char *name)
{
	static const struct {
		const char *ext, *type;
	} types[] = {
	    {".html", "text/html; charset=utf-8"},
	    {".js", "text/javascript; charset=utf-8"},
	    {".css", "text/css; charset=utf-8"},
	    {".svg", "image/svg+xml"},
	};
	const char *dot = strrchr(name, '.');

	for (size_t i = 0; dot && i < ELEMENTSOF(types); i++)
		if (streq(dot, types[i].ext))
			return types[i].type;
	return "application/octet-stream";
}

int lessor_h_ui(lessor_call *c)
{
	const struct lessor_ui_file *f = lessor_ui_lookup(c->path);
	char *copy;

	if (!f)
		return lessor_reply_error(c, 404, "not_found", "no such file");
	copy = malloc(f->len ? f->len : 1);
	if (!copy)
		return lessor_reply_store_error(c, -ENOMEM);
	memcpy(copy, f->data, f->len);
	free(c->reply.body);
	c->reply = (struct lessor_reply){.status = 200,
	                                 .content_type = lessor_ui_content_type(f->name),
	                                 .body = copy,
	                                 .len = f->len,
	                                 .csp = UI_CSP,
	                                 .no_cache = true};
	return LESSOR_CALL_REPLY;
}
