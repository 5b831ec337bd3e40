#!/usr/bin/env bash
# Compiles a one-line file that includes HEADER with the include folders of one engine layer.
#   include_check.sh CXX HEADER ok|fail -I<dir>...
# ok: it must compile. fail: it must stop at that include, the header being out of the layer's reach.
set -u
cxx=$1 header=$2 expect=$3
shift 3
out=$(printf '#include "%s"\n' "$header" | "$cxx" -std=c++20 -fsyntax-only -x c++ - "$@" 2>&1)
rc=$?
if [ "$expect" = ok ]; then
  [ "$rc" -eq 0 ] && { echo "compiles: $header"; exit 0; }
  echo "$header does not compile with $*:"
  echo "$out"
  exit 1
fi
# GCC: "model/model.h: No such file or directory"; clang: "'model/model.h' file not found".
if [ "$rc" -ne 0 ] && { grep -qF "$header: No such file or directory" <<<"$out" ||
                        grep -qF "'$header' file not found" <<<"$out"; }; then
  echo "out of reach, as it must be: $header"
  exit 0
fi
echo "$header was expected to be out of this layer's reach (flags: $*), but the compiler said (exit $rc):"
echo "$out"
exit 1
