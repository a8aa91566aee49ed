# ddp_image_libs.m4 - libpng and libjpeg(-turbo) for `ddpprep --images folder`
# (--with-png=guess|yes|no, --with-jpeg=guess|yes|no, default guess).
#
# libpng through pkg-config (libpng >= 1.6: png_set_scale_16 and the 1.6
# error-handling promises). libjpeg through its classic API (jpeglib.h, as
# Debian's libjpeg62-turbo-dev and every libjpeg flavour ship it), not the
# TurboJPEG one: the classic API gives the error manager that ddpprep routes
# through setjmp/longjmp, scanline decoding and the colour-space controls,
# and it is the API that libjpeg-dev names on every distribution (jpeg_mem_src,
# which reads from memory, needs libjpeg-turbo or libjpeg >= 8).
# pkg-config's libjpeg.pc is used when present (libjpeg-turbo ships it),
# plain -ljpeg otherwise; PNG_CFLAGS/PNG_LIBS and JPEG_CFLAGS/JPEG_LIBS on
# the command line override both. The versions are recorded for --build-info.
# Without either library everything else builds, and `ddpprep --images
# folder` says which library this build lacks (exit status 2).
AC_DEFUN([DDP_CHECK_PNG], [
  AC_ARG_WITH([png], [AS_HELP_STRING([--with-png=guess|yes|no],
              [use libpng to read PNG files for ddpprep --images folder (default: guess)])],
              [ddp_with_png=$withval], [ddp_with_png=guess])
  ddp_have_png=0
  ddp_png_version=
  AS_IF([test "x$ddp_with_png" = xno], [PNG_CFLAGS=; PNG_LIBS=])
  AS_IF([test "x$ddp_with_png" != xno], [
    PKG_CHECK_MODULES([PNG], [libpng >= 1.6], [
      DDP_SAVE_FLAGS
      CPPFLAGS="$CPPFLAGS $PNG_CFLAGS"
      LIBS="$PNG_LIBS $LIBS"
      AC_MSG_CHECKING([whether a libpng program links])
      AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <png.h>]],
          [[png_structp p = png_create_read_struct(PNG_LIBPNG_VER_STRING, 0, 0, 0);
            return p == 0;]])],
        [AC_MSG_RESULT([yes]); ddp_have_png=1
         ddp_png_version=`$PKG_CONFIG --modversion libpng 2>/dev/null`],
        [AC_MSG_RESULT([no])])
      DDP_RESTORE_FLAGS
    ], [:])
    AS_IF([test $ddp_have_png = 0], [
      PNG_CFLAGS=
      PNG_LIBS=
      DDP_PROBE_FAILED([png], [$ddp_with_png], [libpng >= 1.6 was not found (Debian: libpng-dev)])
    ])
  ])
  AC_SUBST([PNG_CFLAGS])
  AC_SUBST([PNG_LIBS])
  DDP_DEFINE_HAVE([PNG], [$ddp_have_png], [Define to 1 when libpng is available.])
  AC_DEFINE_UNQUOTED([DDP_PNG_VERSION], ["$ddp_png_version"], [The libpng version found.])
])

AC_DEFUN([DDP_CHECK_JPEG], [
  AC_ARG_WITH([jpeg], [AS_HELP_STRING([--with-jpeg=guess|yes|no],
              [use libjpeg(-turbo) to read JPEG files for ddpprep --images folder (default: guess)])],
              [ddp_with_jpeg=$withval], [ddp_with_jpeg=guess])
  ddp_have_jpeg=0
  ddp_jpeg_version=
  AS_IF([test "x$ddp_with_jpeg" = xno], [JPEG_CFLAGS=; JPEG_LIBS=])
  AS_IF([test "x$ddp_with_jpeg" != xno], [
    PKG_CHECK_MODULES([JPEG], [libjpeg], [], [JPEG_CFLAGS=; JPEG_LIBS=-ljpeg])
    DDP_SAVE_FLAGS
    CPPFLAGS="$CPPFLAGS $JPEG_CFLAGS"
    LIBS="$JPEG_LIBS $LIBS"
    AC_MSG_CHECKING([for libjpeg (jpeglib.h, jpeg_CreateDecompress and jpeg_mem_src)])
    # jpeglib.h needs stdio.h (FILE) and size_t before it.
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <stdio.h>
                                      #include <jpeglib.h>]],
        [[struct jpeg_decompress_struct d;
          struct jpeg_error_mgr e;
          d.err = jpeg_std_error(&e);
          jpeg_create_decompress(&d);
          jpeg_mem_src(&d, (unsigned char *)"", 0);
          jpeg_destroy_decompress(&d);
          return JPEG_LIB_VERSION < 62;]])],
      [AC_MSG_RESULT([yes]); ddp_have_jpeg=1
       AS_IF([$PKG_CONFIG --exists libjpeg 2>/dev/null],
             [ddp_jpeg_version=`$PKG_CONFIG --modversion libjpeg`])],
      [AC_MSG_RESULT([no])])
    AS_IF([test $ddp_have_jpeg = 1], [
      AC_MSG_CHECKING([whether libjpeg is libjpeg-turbo])
      AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <stdio.h>
                                           #include <jpeglib.h>]],
          [[#ifndef LIBJPEG_TURBO_VERSION
            #error "not libjpeg-turbo"
            #endif]])],
        [AC_MSG_RESULT([yes]); ddp_jpeg_version="libjpeg-turbo $ddp_jpeg_version"],
        [AC_MSG_RESULT([no]); ddp_jpeg_version="libjpeg $ddp_jpeg_version"])
    ])
    DDP_RESTORE_FLAGS
    AS_IF([test $ddp_have_jpeg = 0], [
      JPEG_CFLAGS=
      JPEG_LIBS=
      DDP_PROBE_FAILED([jpeg], [$ddp_with_jpeg],
                       [libjpeg (jpeglib.h and -ljpeg) was not found (Debian: libjpeg62-turbo-dev)])
    ])
  ])
  AC_SUBST([JPEG_CFLAGS])
  AC_SUBST([JPEG_LIBS])
  DDP_DEFINE_HAVE([JPEG], [$ddp_have_jpeg], [Define to 1 when libjpeg is available.])
  AC_DEFINE_UNQUOTED([DDP_JPEG_VERSION], ["$ddp_jpeg_version"], [The libjpeg flavour and version found.])
])
