# ddp_pcre2.m4 - PCRE2 (8-bit) through pkg-config (--with-pcre2=guess|yes|no).
# It runs GPT-2's pre-tokenizer pattern with Unicode properties for the BPE
# tokenizer (ddpprep --tokenizer). Without it everything else builds, and
# `ddpprep --tokenizer` says that this build cannot encode.
AC_DEFUN([DDP_CHECK_PCRE2], [
  AC_ARG_WITH([pcre2], [AS_HELP_STRING([--with-pcre2=guess|yes|no],
              [use PCRE2 for the BPE tokenizer's pre-tokenizer (default: guess)])],
              [ddp_with_pcre2=$withval], [ddp_with_pcre2=guess])
  ddp_have_pcre2=0
  AS_IF([test "x$ddp_with_pcre2" != xno], [
    PKG_CHECK_MODULES([PCRE2], [libpcre2-8 >= 10.30], [ddp_have_pcre2=1],
      [DDP_PROBE_FAILED([pcre2], [$ddp_with_pcre2],
                        [pkg-config found no libpcre2-8 >= 10.30 (Debian: libpcre2-dev)])])
  ])
  DDP_DEFINE_HAVE([PCRE2], [$ddp_have_pcre2], [Define to 1 when PCRE2 is available.])
])
