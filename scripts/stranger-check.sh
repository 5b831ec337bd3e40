#!/usr/bin/env bash
# Checks the README's promise for someone who clones the repository anywhere: the whole suite passes
# with the public files only (docs/fixtures.md). It clones the committed tree (HEAD; uncommitted
# changes are not part of the check) into an empty folder with no ../shared beside it, copies only
# the public files listed by scripts/fixtures.sh --list (sha256 verified) into a separate folder as a
# download would leave them, points DETAUDIT_FIXTURES at it and runs scripts/test.sh there. It fails
# when any test fails or is skipped.
#
#   scripts/stranger-check.sh [WORKDIR]   WORKDIR (new or empty; default a fresh temporary folder)
#                                         keeps the clone and WORKDIR/test.log
#   scripts/stranger-check.sh -h          this help
#
# Takes a full build and test run (about 40 minutes on 2 cores). Not part of scripts/test.sh: run it
# after changing fixtures or the test set-up. Extra environment (CMAKE_CXX_COMPILER_LAUNCHER=ccache,
# say) reaches the build.
set -euo pipefail

case "${1:-}" in -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${1:-$(mktemp -d "${TMPDIR:-/tmp}/detaudit-stranger.XXXXXX")}
mkdir -p "$work"
work=$(cd "$work" && pwd)
[ -z "$(ls -A "$work")" ] || { echo "stranger-check.sh: $work is not empty" >&2; exit 2; }
[ ! -e "$work/../shared" ] || { echo "stranger-check.sh: $work/../shared exists; use a folder without one beside it" >&2; exit 2; }

echo "stranger-check.sh: cloning $(git -C "$root" rev-parse --short HEAD) into $work/detaudit"
git clone --quiet --no-hardlinks "$root" "$work/detaudit"
if [ -n "$(git -C "$root" status --porcelain --untracked-files=no)" ]; then
  echo "stranger-check.sh: note: $root has uncommitted changes; they are not part of this check" >&2
fi

# The public files, from wherever this checkout finds them, checksums verified.
src=$(bash "$root/scripts/fixtures.sh" --check)
mkdir -p "$work/public"
while IFS='|' read -r path sum _url; do
  mkdir -p "$(dirname "$work/public/$path")"
  cp "$src/$path" "$work/public/$path"
  echo "$sum  $work/public/$path" | sha256sum -c --status || { echo "stranger-check.sh: $path: sha256 differs" >&2; exit 1; }
done < <(bash "$root/scripts/fixtures.sh" --list)
echo "stranger-check.sh: $(find "$work/public" -type f | wc -l) public files in $work/public"

cd "$work/detaudit"
set +e
DETAUDIT_FIXTURES="$work/public" bash scripts/test.sh 2>&1 | tee "$work/test.log"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
  echo "stranger-check.sh: FAIL: scripts/test.sh exited $rc in a clone with the public files only ($work/test.log)" >&2
  exit 1
fi
if grep -q "The following tests did not run" "$work/test.log"; then
  echo "stranger-check.sh: FAIL: tests were skipped in a clone with the public files only:" >&2
  sed -n '/The following tests did not run/,/^$/p' "$work/test.log" >&2
  exit 1
fi
summary=$(grep -E "tests passed, [0-9]+ tests failed" "$work/test.log" | tail -1)
echo "stranger-check.sh: PASS: $summary, none skipped, with no ../shared and the public files only"
