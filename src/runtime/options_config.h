/* --config FILE: flags read from a JSON file before the command line.
 *
 * The file is one JSON object whose keys are long flag names without "--"
 * and whose values are what the command line would give: a string (any
 * flag, parsed exactly as typed after the flag), a number (integer and
 * float flags; an integer flag takes only a whole number) or a boolean
 * (flags without a value: true sets the flag, false leaves it unset).
 * ddp_options_parse reads it and then applies the command line on top, so
 * every flag given there wins. The values are ordinary options afterwards:
 * range-checked by the same rows, compared across ranks and recorded in
 * checkpoints like flags typed by hand.
 *
 * The lookups below are the option table's (src/runtime/options.c), for the
 * file reader only; nothing else needs rows by index and kind. */
#ifndef DDPTRAIN_RUNTIME_OPTIONS_CONFIG_H
#define DDPTRAIN_RUNTIME_OPTIONS_CONFIG_H

#include "ddptrain/options.h"

/* What a flag's value is on the command line. */
typedef enum ddp_option_kind {
  DDP_OPTION_KIND_INT,
  DDP_OPTION_KIND_FLOAT,
  DDP_OPTION_KIND_STRING,
  DDP_OPTION_KIND_ACTION /* no value: the flag's presence */
} ddp_option_kind_t;

/* Applies the flags of the JSON file `path` to *opts, each as if typed on
 * the command line. Every failure is one logged line naming the file and,
 * where there is one, the key, or jansson's line and column for malformed
 * JSON, and returns DDP_ERR_INVALID_ARG (exit status 2): a missing or
 * unreadable file, JSON that is not an object, an unknown or duplicated
 * key, "config" itself (one file per run), a value of the wrong JSON type
 * or one the flag's row rejects. */
ddp_status_t ddp_options_read_config(ddp_options_t *opts, const char *path);

/* The row of long flag `name` (without "--"), or -1. */
int ddp_options_find(const char *name);
/* The flag closest to an unknown `name` (two edits at most), or NULL. */
const char *ddp_options_suggest(const char *name);
ddp_option_kind_t ddp_options_kind(int index);
/* Sets row `index` from text as typed after the flag; `origin` starts the
 * error line ("config file F: "). A model's flag counts as given. */
ddp_status_t ddp_options_set_text(ddp_options_t *opts, int index, const char *text,
                                  const char *origin);

#endif
