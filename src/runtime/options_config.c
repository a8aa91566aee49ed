/* --config FILE: reading the JSON file of flags (see options_config.h).
 * jansson parses it; each value becomes the text the command line would
 * have carried and goes through the flag's own row, so a file can express
 * nothing the command line cannot, and is checked no less. */
#include "runtime/options_config.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "ddptrain/log.h"

/* User errors: one line, no source location (the file is at fault, not a
 * line of ours). */
#define CONFIG_ERROR(...) ddp_log_at(DDP_LOG_LEVEL_ERROR, NULL, 0, __VA_ARGS__)

static const char *json_kind_name(const json_t *v) {
  switch (json_typeof(v)) {
    case JSON_OBJECT:
      return "an object";
    case JSON_ARRAY:
      return "an array";
    case JSON_STRING:
      return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
      return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
      return "a boolean";
    case JSON_NULL:
      break;
  }
  return "null";
}

/* What a flag of this kind accepts, for the wrong-type message. */
static const char *accepted(ddp_option_kind_t kind) {
  switch (kind) {
    case DDP_OPTION_KIND_INT:
      return "a whole number or a string";
    case DDP_OPTION_KIND_FLOAT:
      return "a number or a string";
    case DDP_OPTION_KIND_STRING:
      return "a string";
    case DDP_OPTION_KIND_ACTION:
      break;
  }
  return "true or false (a flag without a value)";
}

/* The command-line text of value v for a flag of `kind` into text; 1 when
 * the flag is to be set, 0 for `false` (the flag stays unset), -1 for a
 * value of the wrong JSON type. */
static int value_text(ddp_option_kind_t kind, const json_t *v, char *text, size_t len) {
  if (kind == DDP_OPTION_KIND_ACTION) {
    if (!json_is_boolean(v)) return -1;
    text[0] = '\0';
    return json_is_true(v) ? 1 : 0;
  }
  if (json_is_string(v)) {
    /* longer than any field: the row then reports the length, not a cut */
    snprintf(text, len, "%s", json_string_value(v));
    return 1;
  }
  if (kind == DDP_OPTION_KIND_STRING) return -1;
  if (json_is_integer(v)) {
    snprintf(text, len, "%lld", (long long)json_integer_value(v));
    return 1;
  }
  if (json_is_real(v)) {
    /* an integer flag's row refuses a fraction ("1.5 is not an integer") */
    snprintf(text, len, "%.17g", json_real_value(v));
    return 1;
  }
  return -1;
}

static ddp_status_t apply_key(ddp_options_t *opts, const char *path, const char *key,
                              const json_t *value, const char *origin) {
  const int index = ddp_options_find(key);
  if (index < 0) {
    /* "--lr" is the likeliest slip: suggest from the name without dashes */
    const int dashed = strncmp(key, "--", 2) == 0;
    const char *near = ddp_options_suggest(dashed ? key + 2 : key);
    if (near)
      CONFIG_ERROR(
          "config file %s: unknown key '%s'; did you mean '%s'? (keys are long flag "
          "names without '--')",
          path, key, near);
    else
      CONFIG_ERROR(
          "config file %s: unknown key '%s' (keys are long flag names without '--'; "
          "see --help)",
          path, key);
    return DDP_ERR_INVALID_ARG;
  }
  if (strcmp(key, "config") == 0) {
    CONFIG_ERROR("config file %s: key 'config': a config file cannot name another", path);
    return DDP_ERR_INVALID_ARG;
  }
  const ddp_option_kind_t kind = ddp_options_kind(index);
  char text[2048];
  const int set = value_text(kind, value, text, sizeof text);
  if (set < 0) {
    CONFIG_ERROR("config file %s: key '%s' is %s; --%s takes %s", path, key, json_kind_name(value),
                 key, accepted(kind));
    return DDP_ERR_INVALID_ARG;
  }
  return set ? ddp_options_set_text(opts, index, text, origin) : DDP_OK;
}

ddp_status_t ddp_options_read_config(ddp_options_t *opts, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    CONFIG_ERROR("config file %s: cannot open it: %s", path, strerror(errno));
    return DDP_ERR_INVALID_ARG;
  }
  struct stat sb;
  if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
    fclose(f);
    CONFIG_ERROR("config file %s: is a directory, not a JSON file", path);
    return DDP_ERR_INVALID_ARG;
  }
  json_error_t err;
  /* a key given twice would make one of its values silently lost */
  json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &err);
  fclose(f);
  if (!root) {
    if (err.line > 0)
      CONFIG_ERROR("config file %s: line %d, column %d: %s", path, err.line, err.column, err.text);
    else
      CONFIG_ERROR("config file %s: %s", path, err.text);
    return DDP_ERR_INVALID_ARG;
  }
  if (!json_is_object(root)) {
    CONFIG_ERROR(
        "config file %s: the top level is %s; it must be an object of flags, e.g. "
        "{\"lr\": 0.001}",
        path, json_kind_name(root));
    json_decref(root);
    return DDP_ERR_INVALID_ARG;
  }
  char origin[1100];
  snprintf(origin, sizeof origin, "config file %s: ", path);
  ddp_status_t st = DDP_OK;
  const char *key;
  json_t *value;
  json_object_foreach(root, key, value) {
    st = apply_key(opts, path, key, value, origin);
    if (st != DDP_OK) break;
  }
  json_decref(root);
  return st;
}
