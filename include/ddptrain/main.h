/* The ddptrain program as a library call, for programs that register models
 * of their own (ddptrain/model.h) and then run exactly what `ddptrain` runs:
 *
 *   int main(int argc, char **argv) {
 *     if (ddp_model_register(&my_model_ops) != DDP_OK) return 1;
 *     const ddp_main_config_t cfg = {.program = "my_trainer", .default_model = "mine"};
 *     return ddp_main(argc, argv, &cfg);
 *   }
 *
 * ddp_main parses the command line (every ddptrain flag, plus the flags of
 * every registered model), starts the ranks (MPI), creates the backend the
 * ranks agree on, and trains, or answers --help, --version, --build-info,
 * --plan-only or --self-test. It returns the program's exit status: 0
 * success, 2 bad command line, 75 preempted with a checkpoint written; a
 * runtime failure on any rank aborts the whole job (MPI_Abort with status 1)
 * so that no rank is left waiting for another. */
#ifndef DDPTRAIN_MAIN_H
#define DDPTRAIN_MAIN_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddp_main_config {
  const char *program;       /* the name --help shows; NULL: "ddptrain" */
  const char *default_model; /* --model when the command line has none; NULL: "gpt" */
} ddp_main_config_t;

/* cfg may be NULL. Call once per process. */
int ddp_main(int argc, char **argv, const ddp_main_config_t *cfg);

#ifdef __cplusplus
}
#endif
#endif
