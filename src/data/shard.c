/* llm.c-compatible token shards (docs/design.md §5.1, a contract): a reader that
 * memory-maps one shard or a glob of them into a corpus, and an atomic
 * writer.
 *
 * Layout: 256 little-endian int32 header words — [0] magic, [1] version,
 * [2] token count, [3] EOT id, [4] vocab size, the rest zero — then the
 * tokens, uint16 (magic 20240520, version 1) or uint32 (20240801, version 7).
 * Bytes are decoded explicitly as little-endian rather than by casting the
 * buffer, so the format means the same on every host and no read is
 * misaligned.
 *
 * Every check names the file and, where a single place in it is at fault,
 * the byte offset, because "bad shard" without a location sends the user to
 * a hex editor. Token values are checked while the index is built
 * (corpus.c), which reads every token once anyway. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddptrain/check.h"
#include "ddptrain/data.h"
#include "data/corpus_impl.h"
#include "data/shard_vocab.h"

/* Tokens converted per read/write call: 64 Ki tokens, at most 256 KiB. */
#define CHUNK_TOKENS 65536

static int32_t le32(const unsigned char *p) {
  return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                   (uint32_t)p[3] << 24);
}

static void put_le32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
  p[2] = (unsigned char)(v >> 16);
  p[3] = (unsigned char)(v >> 24);
}

/* ---- reader ------------------------------------------------------------------ */

/* The EOT id and vocab size a header declares. A ddptrain writer always sets
 * both slots; [4] is never 0 then, while [3] may legitimately be 0 (EOT id 0),
 * so a nonzero vocab marks the pair as present. Plain llm.c shards leave both
 * zero and mean GPT-2. A nonzero [3] alone is honoured with the GPT-2 vocab. */
static void header_vocab(const int32_t h[5], int32_t *eot, int32_t *vocab) {
  if (h[4] != 0) {
    *eot = h[3];
    *vocab = h[4];
  } else {
    *eot = h[3] != 0 ? h[3] : DDP_SHARD_GPT2_EOT;
    *vocab = DDP_SHARD_GPT2_VOCAB;
  }
}

/* Maps one shard and checks its header against its size. The whole file is
 * mapped read-only and private: the tokens are used in place, offsets are
 * 64-bit, and the page cache (not the heap) holds the data, so several ranks
 * on one node share it. */
static ddp_status_t map_shard(const char *path, ddp_token_seg_t *seg, int32_t *eot,
                              int32_t *vocab) {
  ddp_status_t st = DDP_OK;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) DDP_FAIL(DDP_ERR_IO, "cannot open shard '%s': %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_IO, close_fd, "cannot stat shard '%s': %s", path, strerror(errno));
  if (!S_ISREG(sb.st_mode))
    DDP_FAIL_GOTO(st, DDP_ERR_IO, close_fd, "shard '%s' is not a regular file", path);
  const long long size = (long long)sb.st_size;
  if (size == 0)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, close_fd,
                  "shard '%s' is empty (0 bytes; a shard starts with a %d-byte header)", path,
                  DDP_SHARD_HEADER_BYTES);
  if (size < DDP_SHARD_HEADER_BYTES)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, close_fd,
                  "shard '%s': truncated header: the file has %lld bytes, the header needs %d",
                  path, size, DDP_SHARD_HEADER_BYTES);
  if ((unsigned long long)size > SIZE_MAX)
    DDP_FAIL_GOTO(st, DDP_ERR_IO, close_fd, "shard '%s': %lld bytes cannot be mapped here", path,
                  size);
  void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED)
    DDP_FAIL_GOTO(st, DDP_ERR_IO, close_fd, "cannot map shard '%s' (%lld bytes): %s", path, size,
                  strerror(errno));
  const unsigned char *hb = map;
  int32_t h[5];
  for (int i = 0; i < 5; ++i) h[i] = le32(hb + 4 * i);

  int wide;
  if (h[0] == DDP_SHARD_MAGIC_U16) {
    wide = 0;
  } else if (h[0] == DDP_SHARD_MAGIC_U32) {
    wide = 1;
  } else {
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, unmap,
                  "shard '%s': bad magic %d at byte 0 (expected %d or %d): not a token shard", path,
                  (int)h[0], DDP_SHARD_MAGIC_U16, DDP_SHARD_MAGIC_U32);
  }
  const int32_t want_version = wide ? DDP_SHARD_VERSION_U32 : DDP_SHARD_VERSION_U16;
  if (h[1] != want_version)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, unmap,
                  "shard '%s': unsupported version %d at byte 4 (magic %d needs version %d)", path,
                  (int)h[1], (int)h[0], (int)want_version);
  const int32_t count = h[2];
  if (count < 0)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, unmap, "shard '%s': negative token count %d at byte 8", path,
                  (int)count);
  if (count == 0)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, unmap, "shard '%s' is empty: the token count at byte 8 is 0",
                  path);
  const long long tsize = wide ? 4 : 2;
  const long long have = size - DDP_SHARD_HEADER_BYTES;
  if (have != (long long)count * tsize)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, unmap,
                  "shard '%s': the header (byte 8) says %d tokens = %lld bytes after the header, "
                  "but the file has %lld (%s)",
                  path, (int)count, (long long)count * tsize, have,
                  have < (long long)count * tsize ? "truncated" : "trailing data");
  header_vocab(h, eot, vocab);
  if (*vocab < 1)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, unmap, "shard '%s': vocab size %d at byte 16 is not positive",
                  path, (int)*vocab);
  /* before anything is sized by it: a corrupt vocab would otherwise become
   * a model of terabytes, or one that trains for days */
  if (*vocab > DDP_SHARD_MAX_VOCAB)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, unmap,
                  "shard '%s': vocab size %d at byte 16 (header slot [4]) exceeds the largest "
                  "supported, %d (2^24); the header is corrupt or not a ddptrain/llm.c shard",
                  path, (int)*vocab, DDP_SHARD_MAX_VOCAB);
  if (*eot < 0 || *eot >= *vocab)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, unmap,
                  "shard '%s': EOT id %d (byte 12) is outside the vocabulary [0, %d) (byte 16)",
                  path, (int)*eot, (int)*vocab);
  char *name = strdup(path);
  if (!name) DDP_FAIL_GOTO(st, DDP_ERR_OOM, unmap, "shard '%s': out of memory", path);
  *seg = (ddp_token_seg_t){.data = hb + DDP_SHARD_HEADER_BYTES,
                           .n_tokens = count,
                           .width = wide ? 4 : 2,
                           .name = name,
                           .map = map,
                           .map_bytes = (size_t)size,
                           .file_bytes = size};
  close(fd);
  return DDP_OK;
unmap:
  munmap(map, (size_t)size);
close_fd:
  close(fd);
  return st;
}

/* Maps paths[0..n) into a fresh corpus and indexes it. */
static ddp_status_t open_paths(ddp_corpus_t *c, char *const *paths, size_t n, int seq_len,
                               const char *source) {
  memset(c, 0, sizeof *c);
  if (seq_len < 1) /* before mapping what may be gigabytes */
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: seq_len %d must be at least 1", source, seq_len);
  if (n > INT32_MAX) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: %zu shards are too many", source, n);
  ddp_status_t st = DDP_OK;
  c->segs = calloc(n, sizeof *c->segs);
  if (!c->segs) DDP_FAIL(DDP_ERR_OOM, "%s: out of memory for %zu shards", source, n);
  for (size_t i = 0; i < n; ++i) {
    int32_t eot, vocab;
    DDP_CHECK_GOTO(map_shard(paths[i], &c->segs[i], &eot, &vocab), st, fail);
    c->n_segs = (int)i + 1;
    if (i == 0) {
      c->eot = eot;
      c->vocab = vocab;
    } else if (eot != c->eot || vocab != c->vocab) {
      DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, fail,
                    "shards disagree: '%s' has EOT %d and vocabulary %d, but '%s' has EOT %d and "
                    "vocabulary %d",
                    paths[i], (int)eot, (int)vocab, paths[0], (int)c->eot, (int)c->vocab);
    }
  }
  DDP_CHECK_GOTO(ddp_corpus_build_index(c, seq_len, source), st, fail);
  return DDP_OK;
fail:
  ddp_corpus_destroy(c);
  return st;
}

ddp_status_t ddp_shard_read(ddp_corpus_t *out, const char *path, int seq_len) {
  if (!out || !path) DDP_FAIL(DDP_ERR_INVALID_ARG, "shard_read: NULL argument");
  char *paths[1] = {(char *)path};
  return open_paths(out, paths, 1, seq_len, path);
}

/* The files pattern matches, at least one; *g is freed on error. */
static ddp_status_t expand(const char *pattern, glob_t *g) {
  memset(g, 0, sizeof *g);
  const int rc = glob(pattern, GLOB_ERR, NULL, g);
  if (rc == GLOB_NOMATCH || (rc == 0 && g->gl_pathc == 0)) {
    globfree(g);
    DDP_FAIL(DDP_ERR_IO, "no file matches '%s'", pattern);
  }
  if (rc != 0) {
    globfree(g);
    DDP_FAIL(DDP_ERR_IO, "cannot expand '%s' (%s)", pattern,
             rc == GLOB_NOSPACE ? "out of memory" : "a directory could not be read");
  }
  return DDP_OK;
}

ddp_status_t ddp_corpus_open(ddp_corpus_t *c, const char *pattern, int seq_len) {
  if (!c || !pattern || !*pattern) DDP_FAIL(DDP_ERR_INVALID_ARG, "corpus_open: no data path");
  memset(c, 0, sizeof *c);
  glob_t g;
  DDP_CHECK(expand(pattern, &g));
  const ddp_status_t st = open_paths(c, g.gl_pathv, g.gl_pathc, seq_len, pattern);
  globfree(&g);
  return st;
}

ddp_status_t ddp_shard_peek_vocab(const char *pattern, int32_t *vocab, int32_t *eot) {
  if (!pattern || !*pattern || !vocab || !eot)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "shard_peek_vocab: NULL argument");
  glob_t g;
  DDP_CHECK(expand(pattern, &g));
  /* the header checks of a full open; mapping reads no token yet */
  ddp_token_seg_t seg;
  const ddp_status_t st = map_shard(g.gl_pathv[0], &seg, eot, vocab);
  globfree(&g);
  if (st != DDP_OK) return st;
  munmap(seg.map, seg.map_bytes);
  free(seg.name);
  return DDP_OK;
}

/* ---- writer ------------------------------------------------------------------ */

static int write_all(int fd, const void *data, size_t n) {
  const char *p = data;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    if (w == 0) {
      errno = ENOSPC;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Makes the rename itself durable: without an fsync of the directory a crash
 * can leave the old name (or none) even though the data was synced. Best
 * effort: some file systems refuse fsync on directories, and by now the new
 * file is complete under its final name either way. */
static void sync_parent_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
  if (!dir) return;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
  free(dir);
}

ddp_status_t ddp_shard_write(const char *path, const int32_t *tokens, int64_t n_tokens, int32_t eot,
                             int32_t vocab) {
  if (!path || !*path) DDP_FAIL(DDP_ERR_INVALID_ARG, "shard_write: no path");
  /* Everything that can be checked is checked before a file exists, so bad
   * input never leaves even a temporary file behind. */
  if (n_tokens <= 0 || !tokens)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "shard '%s': refusing to write a shard without tokens", path);
  if (n_tokens > INT32_MAX)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "shard '%s': %lld tokens exceed the %d that the header's int32 count can hold; "
             "split the data into several shards",
             path, (long long)n_tokens, INT32_MAX);
  if (vocab < 1 || eot < 0 || eot >= vocab)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "shard '%s': EOT id %d is outside the vocabulary [0, %d)", path,
             (int)eot, (int)vocab);
  if (vocab > DDP_SHARD_MAX_VOCAB) /* a reader would refuse the file */
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "shard '%s': vocab size %d exceeds the largest supported, %d (2^24)", path, (int)vocab,
             DDP_SHARD_MAX_VOCAB);
  for (int64_t i = 0; i < n_tokens; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      DDP_FAIL(DDP_ERR_INVALID_ARG,
               "shard '%s': token %lld has value %d, outside the vocabulary [0, %d)", path,
               (long long)i, (int)tokens[i], (int)vocab);

  const int wide = vocab > 65536;
  const size_t tsize = wide ? 4 : 2;
  ddp_status_t st = DDP_OK;
  const size_t plen = strlen(path);
  char *tmp = malloc(plen + 5);
  unsigned char *buf =
      malloc(CHUNK_TOKENS * 4 > DDP_SHARD_HEADER_BYTES ? CHUNK_TOKENS * 4 : DDP_SHARD_HEADER_BYTES);
  if (!tmp || !buf) DDP_FAIL_GOTO(st, DDP_ERR_OOM, free_buffers, "shard '%s': out of memory", path);
  memcpy(tmp, path, plen);
  memcpy(tmp + plen, ".tmp", 5);

  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    DDP_FAIL_GOTO(st, DDP_ERR_IO, free_buffers, "shard '%s': cannot create '%s': %s", path, tmp,
                  strerror(errno));

  memset(buf, 0, DDP_SHARD_HEADER_BYTES);
  put_le32(buf + 0, wide ? DDP_SHARD_MAGIC_U32 : DDP_SHARD_MAGIC_U16);
  put_le32(buf + 4, wide ? DDP_SHARD_VERSION_U32 : DDP_SHARD_VERSION_U16);
  put_le32(buf + 8, (uint32_t)n_tokens);
  put_le32(buf + 12, (uint32_t)eot);
  put_le32(buf + 16, (uint32_t)vocab);
  long long at = 0;
  if (write_all(fd, buf, DDP_SHARD_HEADER_BYTES) != 0) goto write_failed;
  at = DDP_SHARD_HEADER_BYTES;
  for (int64_t done = 0; done < n_tokens;) {
    const int64_t left = n_tokens - done;
    const size_t n = left < CHUNK_TOKENS ? (size_t)left : CHUNK_TOKENS;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t v = (uint32_t)tokens[done + (int64_t)i];
      if (wide) {
        put_le32(buf + 4 * i, v);
      } else {
        buf[2 * i] = (unsigned char)v;
        buf[2 * i + 1] = (unsigned char)(v >> 8);
      }
    }
    if (write_all(fd, buf, n * tsize) != 0) goto write_failed;
    done += (int64_t)n;
    at += (long long)(n * tsize);
  }
  if (fsync(fd) != 0) goto write_failed;
  {
    const int rc = close(fd);
    fd = -1;
    if (rc != 0) goto write_failed;
  }
  if (rename(tmp, path) != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_IO, remove_tmp, "shard '%s': cannot rename '%s' to it: %s", path, tmp,
                  strerror(errno));
  sync_parent_dir(path);
  goto free_buffers;

write_failed:
  DDP_LOG_ERROR("shard '%s': writing '%s' failed after %lld bytes: %s", path, tmp, at,
                strerror(errno));
  st = DDP_ERR_IO;
  if (fd >= 0) close(fd);
remove_tmp:
  unlink(tmp);
free_buffers:
  free(buf);
  free(tmp);
  return st;
}
