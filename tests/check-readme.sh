#!/bin/sh
# CI must run exactly the README's test command: this test fails when the
# second fenced command of the README and the last line of .ci/run differ.
. "${top_builddir:-.}/tests/env.sh"
readme_cmd=$(awk '/^```sh$/{n++; next} /^```$/{next} n==2 && !done {print; done=1}' "$top_srcdir/README.md")
ci_cmd=$(grep -v '^\s*#' "$top_srcdir/.ci/run" | grep -v '^\s*$' | tail -n 1)
if [ -z "$readme_cmd" ] || [ "$readme_cmd" != "$ci_cmd" ]; then
  echo "FAIL: README test command and .ci/run differ:"
  echo "  README: $readme_cmd"
  echo "  .ci/run: $ci_cmd"
  exit 1
fi
echo "ok: .ci/run runs the README test command: $readme_cmd"
