/* ndjson.h: the NDJSON framing of a client connection: one request per
 * line, pipelined (every complete line is submitted at once, and answers
 * carry the request's id), a session whose locks die with the connection
 * and whose events are written as lines. Reached through its struct
 * framing_ops only (client.h). */
#ifndef REDLOCKD_NDJSON_H
#define REDLOCKD_NDJSON_H

#include "client.h"

extern const struct framing_ops ndjson_framing;

/* ndjson_resume: NDJSON's resume, also a connection's whose framing is not
 * known yet: closes after the peer's EOF once all is answered, else serves
 * the input held back by a pause. */
void ndjson_resume(struct client *cl);

#endif
