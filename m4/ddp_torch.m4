# ddp_torch.m4 - a Python interpreter that can import torch, for the PyTorch
# reference tests (tests/reference/). Debian's python3-torch installs into
# /usr/bin/python3, which need not be the python3 first on PATH (pyenv,
# virtualenvs), so candidates are tried in order: $TORCH_PYTHON, python3 on
# PATH, /usr/bin/python3. Without one, the reference tests SKIP and say why.
AC_DEFUN([DDP_CHECK_TORCH], [
  AC_ARG_VAR([TORCH_PYTHON], [Python interpreter with PyTorch for the reference tests])
  AC_MSG_CHECKING([for a Python with PyTorch (reference tests)])
  ddp_torch_found=
  ddp_torch_version=
  for ddp_py in "$TORCH_PYTHON" python3 /usr/bin/python3; do
    test -n "$ddp_py" || continue
    ddp_torch_version=`"$ddp_py" -c "import torch, numpy; print(torch.__version__)" 2>/dev/null` || continue
    ddp_torch_found=`command -v "$ddp_py"`
    break
  done
  TORCH_PYTHON=$ddp_torch_found
  AS_IF([test -n "$TORCH_PYTHON"], [AC_MSG_RESULT([$TORCH_PYTHON (torch $ddp_torch_version)])],
        [AC_MSG_RESULT([no (the PyTorch reference tests will SKIP; Debian: python3-torch)])])
])
