# ddp_hwloc.m4 - hwloc through pkg-config (--with-hwloc=guess|yes|no).
# hwloc gives the core count per node (CPU thread defaults) and, on GPU nodes,
# the cores nearest each GPU for rank binding.
AC_DEFUN([DDP_CHECK_HWLOC], [
  AC_ARG_WITH([hwloc], [AS_HELP_STRING([--with-hwloc=guess|yes|no],
              [use hwloc for topology and binding (default: guess)])],
              [ddp_with_hwloc=$withval], [ddp_with_hwloc=guess])
  ddp_have_hwloc=0
  AS_IF([test "x$ddp_with_hwloc" != xno], [
    PKG_CHECK_MODULES([HWLOC], [hwloc >= 2.0], [ddp_have_hwloc=1],
      [DDP_PROBE_FAILED([hwloc], [$ddp_with_hwloc], [pkg-config found no hwloc >= 2.0])])
  ])
  DDP_DEFINE_HAVE([HWLOC], [$ddp_have_hwloc], [Define to 1 when hwloc is available.])
])
