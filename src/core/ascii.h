/* Locale-independent ASCII helpers (internal). strcasecmp honours the locale
 * (a Turkish "I" is not "i") and is not declared under strict C11, and flag
 * and config values are ASCII by definition. */
#ifndef DDPTRAIN_ASCII_H
#define DDPTRAIN_ASCII_H

/* Nonzero when a and b are equal ignoring ASCII case. */
static inline int ddp_ascii_ieq(const char *a, const char *b) {
  for (;; ++a, ++b) {
    unsigned char ca = (unsigned char)*a, cb = (unsigned char)*b;
    if (ca >= 'A' && ca <= 'Z') ca = (unsigned char)(ca - 'A' + 'a');
    if (cb >= 'A' && cb <= 'Z') cb = (unsigned char)(cb - 'A' + 'a');
    if (ca != cb) return 0;
    if (ca == '\0') return 1;
  }
}

#endif
