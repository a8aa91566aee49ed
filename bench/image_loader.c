/* Images per second of the image loader's fill alone (no model): the
 * augmented fill of training micro-batches (random crop after zero
 * padding, flip, normalisation into fp32) as the loader thread runs it,
 * for 1 .. N fill threads, on an image shard or the built-in image set.
 * Each pass fills `batches` micro-batches of random items in a new epoch;
 * the median pass is reported. The items are drawn at random (the
 * sampler's shuffle), so the reads are as scattered as in training.
 * Usage (see bench/image_loader.sh):
 *   image_loader SHARD|builtin BATCH MAX_THREADS [passes] [batches] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/data.h"
#include "ddptrain/rng.h"
#include "data/builtin_images.h"
#include "data/image_source.h"

#include "bench_timing.h"

enum { MAX_PASSES = 32 };

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: image_loader SHARD|builtin BATCH MAX_THREADS [passes] [batches]\n");
    return 2;
  }
  const int B = atoi(argv[2]), max_threads = atoi(argv[3]);
  int passes = argc > 4 ? atoi(argv[4]) : 5;
  const int batches = argc > 5 ? atoi(argv[5]) : 50;
  if (B < 1 || max_threads < 1 || passes < 1 || batches < 1) return 2;
  if (passes > MAX_PASSES) passes = MAX_PASSES;
  ddp_image_source_t s;
  const int builtin = strcmp(argv[1], "builtin") == 0;
  const double t0 = bench_now_ms();
  if ((builtin ? ddp_image_source_builtin(&s, 1337, DDP_SPLIT_TRAIN, DDP_BUILTIN_IMAGES_TRAIN)
               : ddp_image_source_open(&s, argv[1])) != DDP_OK)
    return 1;
  const double load_ms = bench_now_ms() - t0;
  float mean[DDP_IMG_MAX_CHANNELS], std[DDP_IMG_MAX_CHANNELS];
  const double t1 = bench_now_ms();
  ddp_image_source_channel_stats(&s, mean, std);
  const double stats_ms = bench_now_ms() - t1;
  if (ddp_image_source_set_normalization(&s, mean, std) != DDP_OK) return 1;
  const ddp_image_aug_t aug = {.crop_pad = ddp_image_default_crop_pad(&s.shape), .hflip = 1};
  float *out = malloc((size_t)B * (size_t)s.image_bytes * sizeof *out);
  int32_t *labels = malloc((size_t)B * sizeof *labels);
  int64_t *items = malloc((size_t)B * (size_t)batches * sizeof *items);
  if (!out || !labels || !items) return 1;
  ddp_rng_t rng;
  ddp_rng_init(&rng, 1, 99);
  for (int64_t i = 0; i < (int64_t)B * batches; ++i)
    items[i] = (int64_t)ddp_rng_below(&rng, (uint64_t)i, (uint64_t)s.n);
  const char *name = builtin                 ? "built-in"
                     : strrchr(argv[1], '/') ? strrchr(argv[1], '/') + 1
                                             : argv[1];
  fprintf(stderr, "%s: %lld images %dx%dx%d, loaded in %.0f ms, statistics in %.0f ms\n", name,
          (long long)s.n, s.shape.height, s.shape.width, s.shape.channels, load_ms, stats_ms);
  /* 1, 2, 4, ... and max_threads */
  for (int threads = 1; threads <= max_threads;
       threads = threads < max_threads && threads * 2 > max_threads ? max_threads : threads * 2) {
    double ms[MAX_PASSES];
    for (int p = 0; p < passes; ++p) {
      const double a = bench_now_ms();
      for (int k = 0; k < batches; ++k)
        if (ddp_image_source_fill(&s, &aug, 1337, p, items + (size_t)k * (size_t)B, B, threads, out,
                                  labels) != DDP_OK)
          return 1;
      ms[p] = bench_now_ms() - a;
    }
    const double med = bench_median(ms, passes);
    const double ips = (double)B * batches / (med / 1e3);
    printf("| %s | %dx%dx%d | %d | %d | %.0f | %.1f |\n", name, s.shape.height, s.shape.width,
           s.shape.channels, B, threads, ips,
           ips * (double)s.image_bytes * sizeof(float) / 1048576.0);
  }
  free(out);
  free(labels);
  free(items);
  ddp_image_source_destroy(&s);
  return 0;
}
