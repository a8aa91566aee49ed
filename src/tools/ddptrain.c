/* The ddptrain program: the library's main (ddptrain/main.h) with the
 * built-in models. Everything it does lives in the library, so a user's
 * program that registers a model of its own behaves exactly like it. */
#include <stddef.h>

#include "ddptrain/main.h"

int main(int argc, char **argv) {
  return ddp_main(argc, argv, NULL);
}
