/* missing.c: see missing.h. The texts are those of Redis 6.0 to 8.0 and
 * Valkey 8: 6.0 quotes an unknown command in backticks, later releases in
 * single quotes; a script's own refusal names no command (and Valkey
 * drops the "Redis" of "Unknown Redis command called from script"). */
#include "missing.h"

#include <ctype.h>
#include <string.h>

#define UNKNOWN "ERR unknown command "
#define NOT_ALLOWED "permissions to run the '"

/* Copies the word at p, up to its closing quote, into name, upper case. */
static void copy_word(const char *p, char *name, size_t len)
{
    size_t n = 0;
    while (p[n] != '\0' && p[n] != '\'' && p[n] != '`' && n + 1 < len) {
        name[n] = (char)toupper((unsigned char)p[n]);
        n++;
    }
    if (len > 0) {
        name[n] = '\0';
    }
}

enum missing_kind missing_of(const char *err, char *name, size_t len)
{
    copy_word("", name, len);
    if (err == NULL) {
        return MISSING_NONE;
    }
    const char *p;
    if (strncmp(err, UNKNOWN, strlen(UNKNOWN)) == 0) {
        p = err + strlen(UNKNOWN);
        copy_word(*p == '\'' || *p == '`' ? p + 1 : p, name, len);
        return MISSING_COMMAND;
    }
    if (strstr(err, "nknown Redis command called from") != NULL ||
        strstr(err, "nknown command called from") != NULL) {
        return MISSING_COMMAND;
    }
    if ((p = strstr(err, NOT_ALLOWED)) != NULL) {
        copy_word(p + strlen(NOT_ALLOWED), name, len);
        return MISSING_PERMISSION;
    }
    if (strstr(err, "can't run this command or subcommand") != NULL) {
        return MISSING_PERMISSION;
    }
    if (strncmp(err, "NOPERM", 6) == 0 ||
        strstr(err, "can't access at least one of the") != NULL) {
        return MISSING_KEY;
    }
    return MISSING_NONE;
}

const char *missing_text(enum missing_kind kind)
{
    switch (kind) {
    case MISSING_COMMAND:
        return "is renamed away or disabled here";
    case MISSING_PERMISSION:
        return "is not allowed to the ACL user";
    case MISSING_KEY:
        return "needs a key or channel the ACL denies";
    case MISSING_NONE:
        break;
    }
    return "was refused";
}
