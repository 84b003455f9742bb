/* caps.h: what a server's command table offers beyond the scripts, read
 * from its replies (no I/O). A node's handshake asks COMMAND DOCS SET and
 * COMMAND INFO DELIFEQ DELEX; the flags found there pick the native
 * extend and release (batch.h). The command table says it, not the
 * version: Valkey 8.1 has SET ... IFEQ and says redis_version:7.2.4. */
#ifndef REDLOCKD_CAPS_H
#define REDLOCKD_CAPS_H

struct redisReply;

/* A node's capability flags; 0: scripts for everything. */
enum caps_flag {
    CAPS_SET_IFEQ = 1u << 0, /* SET key value IFEQ cmp PX ms: Valkey 8.1,
                                Redis 8.4 */
    CAPS_DELIFEQ = 1u << 1,  /* DELIFEQ key value -> 1/0: Valkey 9.0 */
    CAPS_DELEX = 1u << 2,    /* DELEX key IFEQ value -> 1/0: Redis 8.4 */
};

/* caps_set_docs: CAPS_SET_IFEQ when r, the reply to COMMAND DOCS SET,
 * lists an argument whose token is IFEQ; 0 for any other reply, an error
 * among them (a server before 7.0 has no COMMAND DOCS, an ACL may refuse
 * it: no native form, not a failed handshake). */
unsigned caps_set_docs(const struct redisReply *r);

/* caps_command_info: CAPS_DELIFEQ and CAPS_DELEX for the commands that r,
 * the reply to COMMAND INFO DELIFEQ DELEX, describes (a command the
 * server lacks answers nil); 0 for an error or another shape. */
unsigned caps_command_info(const struct redisReply *r);

#endif
