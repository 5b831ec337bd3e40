#!/usr/bin/env bash
# Lists, with the compiler, every header the sources of one folder (and its subfolders) include,
# directly or through other headers, and checks them against a pattern.
#   include_scan.sh CXX ROOT DIR REGEX none|some -I<dir>...
# Each source (*.h *.hpp *.inc *.cpp *.cc) is preprocessed with -MM and the include folders given;
# each header it reads is resolved (symbolic links followed) to a path relative to ROOT, and those
# outside ROOT are left out (system headers). none: no such path matches REGEX (extended regex; the
# sources and the offending headers are printed). some: at least one does (a control: the scan
# finds what it looks for).
# For folders that share one include root (probes/, reports/, cli/), where the compiler cannot tell
# a sibling's header from one's own, this is the boundary's check. Because the compiler resolves the
# includes, no spelling escapes it: "./", "//", macros, line continuations, or a header that
# includes the forbidden one.
set -u
cxx=$1 root=$2 dir=$3 re=$4 expect=$5
shift 5
[ -d "$root/$dir" ] || { echo "no such folder: $root/$dir"; exit 1; }
# A pattern grep cannot read would match nothing, and pass every "none".
printf 'x\n' | grep -qE "$re"
[ $? -eq 2 ] && { echo "not an extended regular expression: $re"; exit 1; }
mapfile -t files < <(find "$root/$dir" -type f \( -name '*.h' -o -name '*.hpp' -o -name '*.inc' -o -name '*.cpp' -o -name '*.cc' \) | sort)
[ ${#files[@]} -gt 0 ] || { echo "no sources in $root/$dir"; exit 1; }
root_real=$(realpath "$root")
hits=""
for f in "${files[@]}"; do
  if ! deps=$("$cxx" -std=c++20 -x c++ -MM -MT x "$@" "$f" 2>&1); then
    echo "cannot list the includes of $f:"
    echo "$deps"
    exit 1
  fi
  # "x: a.cpp b.h \" lines -> one path per line, the source itself dropped.
  while read -r p; do
    [ -z "$p" ] && continue
    r=$(realpath -m "$p")
    case "$r" in "$root_real"/*) ;; *) continue ;; esac
    rel=${r#"$root_real"/}
    [ "$rel" = "${f#"$root_real"/}" ] && continue
    if printf '%s\n' "$rel" | grep -qE "$re"; then hits+="${f#"$root"/} -> $rel"$'\n'; fi
  done < <(printf '%s\n' "$deps" | sed -e 's/^x://' -e 's/\\$//' | tr ' ' '\n')
done
if [ "$expect" = none ]; then
  [ -z "$hits" ] && { echo "no header matching /$re/ reached from $dir (${#files[@]} files)"; exit 0; }
  echo "$dir must not reach headers matching /$re/, but:"
  printf '%s' "$hits"
  exit 1
fi
[ -n "$hits" ] && { echo "found, as the control expects:"; printf '%s' "$hits" | head -3; exit 0; }
echo "expected a header matching /$re/ reached from $dir, found none (the scan would not see a violation)"
exit 1
