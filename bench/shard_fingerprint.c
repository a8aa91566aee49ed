/* What the shard content hash costs: the sampled hash that ranks compare
 * (ddp_corpus_sample_hash, what each segment's content_hash holds) against
 * the start-up work it rides on (ddp_shard_read: header checks, the index
 * pass over every token, the sampled hash) and against a full FNV-1a hash
 * of every byte, each with a cold and a warm page cache.
 *
 * Cold means the file's pages were dropped first (fsync, then
 * posix_fadvise DONTNEED, which needs no privileges); a page cache shared
 * by a virtual machine's host may still serve some reads from memory.
 * Median of `passes` passes, in milliseconds. Creates FILE with a synthetic
 * uint16 shard of MIB MiB when it does not exist (documents of 1-2000
 * tokens).
 * Usage (see bench/shard_fingerprint.sh): shard_fingerprint FILE MIB [passes] */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ddptrain/data.h"
#include "core/hash.h"
#include "data/corpus_impl.h"

#include "bench_timing.h"

enum { MAX_PASSES = 16, EOT = 256, VOCAB = 257 };

/* Writes a shard of about `mib` MiB straight to disk (the library's writer
 * takes every token in memory at once, 2x the file as int32). */
static int make_shard(const char *path, long mib) {
  const int64_t n = (int64_t)mib * 1048576 / 2 - DDP_SHARD_HEADER_BYTES / 2;
  if (n < 1 || n > INT32_MAX) return -1;
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int32_t h[DDP_SHARD_HEADER_INTS] = {DDP_SHARD_MAGIC_U16, DDP_SHARD_VERSION_U16, (int32_t)n, EOT,
                                      VOCAB};
  int ok = fwrite(h, sizeof h, 1, f) == 1; /* the host is little-endian (corpus.c) */
  uint16_t buf[65536];
  uint64_t x = 88172645463325252u, doc = 0;
  for (int64_t done = 0; ok && done < n;) {
    const int64_t k = n - done < 65536 ? n - done : 65536;
    for (int64_t i = 0; i < k; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      if (doc == 0) {
        buf[i] = EOT;
        doc = 1 + x % 2000;
      } else {
        buf[i] = (uint16_t)(x % 256);
        --doc;
      }
    }
    ok = fwrite(buf, 2, (size_t)k, f) == (size_t)k;
    done += k;
  }
  return fclose(f) == 0 && ok ? 0 : -1;
}

static void drop_cache(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return;
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

/* Maps the file and hashes it, sampled or whole; milliseconds. */
static double time_hash(const char *path, int64_t size, int full, uint64_t *h) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  const double t0 = bench_now_ms();
  void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return -1;
  *h = full ? ddp_fnv1a64(DDP_FNV1A64_INIT, map, (size_t)size) : ddp_corpus_sample_hash(map, size);
  const double t = bench_now_ms() - t0;
  munmap(map, (size_t)size);
  return t;
}

static double time_read(const char *path, int64_t *windows) {
  ddp_corpus_t c;
  const double t0 = bench_now_ms();
  if (ddp_shard_read(&c, path, 1024) != DDP_OK) return -1;
  const double t = bench_now_ms() - t0;
  *windows = c.n_windows;
  ddp_corpus_destroy(&c);
  return t;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s FILE MIB [passes]\n", argv[0]);
    return 2;
  }
  const char *path = argv[1];
  const int passes = argc > 3 ? atoi(argv[3]) : 3;
  if (passes < 1 || passes > MAX_PASSES) return 2;
  struct stat sb;
  if (stat(path, &sb) != 0 && make_shard(path, atol(argv[2])) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    return 1;
  }
  if (stat(path, &sb) != 0) return 1;
  const int64_t size = (int64_t)sb.st_size;
  double t[6][MAX_PASSES];
  uint64_t h = 0, hs = 0;
  int64_t windows = 0;
  for (int p = 0; p < passes; ++p) {
    drop_cache(path);
    t[0][p] = time_hash(path, size, 0, &hs); /* sampled, cold */
    drop_cache(path);
    t[1][p] = time_hash(path, size, 1, &h); /* full, cold */
    drop_cache(path);
    t[2][p] = time_read(path, &windows); /* index pass + sampled hash, cold */
    t[3][p] = time_read(path, &windows); /* the same, warm */
    t[4][p] = time_hash(path, size, 0, &hs);
    t[5][p] = time_hash(path, size, 1, &h);
    for (int k = 0; k < 6; ++k)
      if (t[k][p] < 0) {
        fprintf(stderr, "measurement %d failed\n", k);
        return 1;
      }
  }
  const double mib = (double)size / 1048576.0;
  int64_t stride = size / 64;
  if (stride < 4096) stride = 4096;
  if (stride > 1 << 20) stride = 1 << 20;
  const int64_t sampled = ((size + stride - 1) / stride + 1) * 4096;
  double m[6];
  for (int k = 0; k < 6; ++k) m[k] = bench_median(t[k], passes);
  printf("| %.0f MiB | %.2f MiB (%.2f%%) | %.1f | %.1f | %.0f | %.0f | %.0f | %.0f |\n", mib,
         (double)sampled / 1048576.0, 100.0 * (double)sampled / (double)size, m[0], m[4], m[2],
         m[3], m[1], m[5]);
  fprintf(stderr,
          "%.0f MiB, per GiB: sampled hash %.1f ms cold, %.2f ms warm; shard read %.0f ms cold, "
          "%.0f ms "
          "warm; full FNV-1a %.0f ms cold, %.0f ms warm; %lld windows; hashes %016llx %016llx\n",
          mib, m[0] / mib * 1024, m[4] / mib * 1024, m[2] / mib * 1024, m[3] / mib * 1024,
          m[1] / mib * 1024, m[5] / mib * 1024, (long long)windows, (unsigned long long)hs,
          (unsigned long long)h);
  return 0;
}
