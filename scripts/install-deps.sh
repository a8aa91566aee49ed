#!/bin/sh
# Installs what ddptrain needs to build on Debian 12 (or Ubuntu): the
# autotools, Open MPI, hwloc, Check, OpenBLAS, jansson, zlib, PCRE2, oneDNN,
# libpng and libjpeg-turbo (ddpprep --images folder) and pkg-config,
# help2man (the man pages from --help) and bash-completion (where its
# completions go); with --test also what only the tests need (PyTorch for the reference model, a
# large download the default job does not need; groff and man-db to render
# the man pages in tests/test_man.sh; SLURM and munge for
# `make check-slurm`; iproute2 for the two-host network-namespace test;
# matplotlib for tools/ddpplot; Fashion-MNIST for the image conversion; PIL to
# make the JPEGs of tests/test_ddpprep_folder.sh; clang
# and its libFuzzer runtime for the bounded fuzzing stage). Idempotent:
# packages already present are not touched, and apt-get runs only when
# something is missing. Uses sudo when not run as root.
#
# The CUDA toolkit is not installed here: it comes from NVIDIA, and without it
# ddptrain builds its CPU backend only.
set -eu
pkgs="build-essential autoconf automake libtool pkg-config
      openmpi-bin libopenmpi-dev libhwloc-dev check libsubunit-dev libopenblas-dev libjansson-dev
      zlib1g-dev libpcre2-dev libdnnl-dev libpng-dev libjpeg62-turbo-dev help2man bash-completion"
case "${1:-}" in
  --test) pkgs="$pkgs python3-torch python3-numpy python3-matplotlib slurm-wlm munge iproute2 groff-base man-db"
          pkgs="$pkgs dataset-fashion-mnist" # a real data set for tests/test_ddpprep_images.sh
          pkgs="$pkgs python3-pil" # JPEG files for tests/test_ddpprep_folder.sh
          pkgs="$pkgs clang-14 libclang-rt-14-dev" ;; # libFuzzer: tests/fuzz/run-fuzz.sh
  "") ;;
  *) echo "usage: $0 [--test]" >&2; exit 2 ;;
esac
missing=
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
  echo "install-deps: all packages present"
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then sudo=; else sudo=sudo; fi
echo "install-deps: installing$missing"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing
