#!/usr/bin/env bash
# Scans the #include lines of the sources directly in one folder (not its subfolders).
#   include_scan.sh DIR REGEX none|some
# none: no source there includes a header whose path matches REGEX (extended regex); the offending
# lines are printed. some: at least one does (a control: the scan finds what it looks for).
# For folders that share one include root (probes/, reports/, cli/), where the compiler cannot tell
# a sibling's header from one's own, this is the boundary's check.
set -u
dir=$1 re=$2 expect=$3
[ -d "$dir" ] || { echo "no such folder: $dir"; exit 1; }
shopt -s nullglob
files=("$dir"/*.h "$dir"/*.cpp "$dir"/*.cu)
[ ${#files[@]} -gt 0 ] || { echo "no sources in $dir"; exit 1; }
# Both spellings: #include "x.h" and #include <x.h> (the shared root is on the -I path either way).
hits=$(grep -HnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]' "${files[@]}" |
       sed -E 's/^([^:]*:[0-9]+):[^"<]*["<]([^">]*)[">].*/\1 \2/' |
       awk -v re="$re" '$2 ~ re')
if [ "$expect" = none ]; then
  [ -z "$hits" ] && { echo "no include of /$re/ in $dir (${#files[@]} files)"; exit 0; }
  echo "$dir must not include headers matching /$re/, but:"
  echo "$hits"
  exit 1
fi
[ -n "$hits" ] && { echo "found, as the control expects:"; echo "$hits" | head -3; exit 0; }
echo "expected an include of /$re/ in $dir, found none (the scan would not see a violation)"
exit 1
