#!/usr/bin/env bash
# Compiles the documentation's code blocks that are marked to be: a line
#   <!-- compiled: CONTEXT -->
# right before a ```cpp fence puts the block into contexts/CONTEXT.cpp and compiles that as
# a user would (-Wall -Wextra -Wpedantic -Werror; unused names allowed, snippets being
# excerpts). Found by a black-box test: a snippet that did not compile, and one that broke a
# user's -Wextra build.
#
# A context is: what every snippet of it needs (includes), the line `// SNIPPET_HEAD`, the
# code around a snippet (a function that has the names the snippet uses), with the line
# `// SNIPPET` where the snippet goes. The snippets of all contexts with the same includes
# compile as one translation unit (parsing the headers is most of the time: one unit a
# snippet took 5-12 s each): a block's leading #include lines go above them all; the rest
# of its leading lines (`using namespace`, namespace aliases) and the code around it go in
# a namespace of the block's own, so no two blocks see each other's names (they do see
# each other's includes). `#line` directives make every message name the .md file and its
# line. The units compile side by side, as many at once as there are processors.
# Usage: snippets.sh CXX SOURCE_DIR WORK_DIR
set -euo pipefail
cxx=$1 source=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
rm -f "$work"/*.cpp "$work"/*.log "$work"/*.report "$work"/*.passed "$work"/*.part "$work"/*.list "$work"/*.prelude "$work"/*.includes
shopt -s nullglob
for doc in "$source"/README.md "$source"/docs/*.md "$source"/docs/*/*.md; do
  awk -v doc="${doc#"$source"/}" -v work="$work" -v contexts="$here/contexts" '
    function load(c,    line, n, part) {  # the context: prelude, code before and after the snippet
      if (c in loaded) return
      loaded[c] = 1; part = 0; n = 0
      file = contexts "/" c ".cpp"
      if ((getline line < file) <= 0) { print doc ":" start ": no context " file > "/dev/stderr"; bad = 2; exit 2 }
      do {
        n++
        if (line ~ /^\/\/ SNIPPET_HEAD$/) { part = 1; openline[c] = n + 1; continue }
        if (line ~ /^\/\/ SNIPPET$/) { part = 2; closeline[c] = n + 1; continue }
        if (part == 0) prelude[c] = prelude[c] line "\n"
        else if (part == 1) open[c] = open[c] line "\n"
        else close_[c] = close_[c] line "\n"
      } while ((getline line < file) > 0)
      close(file)
      if (part != 2) { print file ": no // SNIPPET_HEAD and // SNIPPET lines" > "/dev/stderr"; bad = 2; exit 2 }
    }
    function flush(    name, file, out) {
      load(context)
      file = contexts "/" context ".cpp"
      name = doc "_" start; gsub(/[^A-Za-z0-9]/, "_", name)
      out = work "/" context ".part"
      printf "%s", prelude[context] > (work "/" context ".prelude"); close(work "/" context ".prelude")
      printf "%s", includes >> (work "/" context ".includes"); close(work "/" context ".includes")
      printf "namespace snippet_%s {\n#line %d \"%s\"\n%s#line %d \"%s\"\n%s#line %d \"%s\"\n%s#line %d \"%s\"\n%s}  // namespace snippet_%s\n\n",
             name, start, doc, head, openline[context], file, open[context], bodyline, doc, body,
             closeline[context], file, close_[context], name >> out
      close(out)
      print doc ":" start ":" NR - 1 >> (work "/" context ".list"); close(work "/" context ".list")
    }
    /^<!-- compiled: [a-z0-9_]+ -->$/ { context = $3; armed = 1; next }
    /^<!-- compiled:/ { print doc ":" NR ": not a marker (<!-- compiled: CONTEXT -->): " $0 > "/dev/stderr"; bad = 1; next }
    armed && /^```cpp$/ {
      inside = 1; armed = 0; start = NR + 1; bodyline = start; head = ""; body = ""; includes = ""; inhead = 1; next
    }
    armed { print doc ":" NR ": a marker must be the line right before a ```cpp fence" > "/dev/stderr"; bad = 1 }
    { armed = 0 }
    inside && /^```$/ { inside = 0; flush(); next }
    inside {
      if (inhead && $0 ~ /^#include /) { includes = includes "#line " NR " \"" doc "\"\n" $0 "\n"; head = head "\n"; bodyline = NR + 1 }
      else if (inhead && ($0 ~ /^using namespace / || $0 ~ /^namespace [a-z_]+ = / || $0 ~ /^$/)) { head = head $0 "\n"; bodyline = NR + 1 }
      else { inhead = 0; body = body $0 "\n" }
    }
    END { exit bad }
  ' "$doc"
done
lists=("$work"/*.list)
if [ ${#lists[@]} -eq 0 ]; then echo "no marked snippet found" >&2; exit 1; fi
# Contexts whose includes (their lines before `// SNIPPET_HEAD`, comments aside) are the
# same share a unit: the headers are parsed once for all their snippets.
declare -A unit_of
for list in "${lists[@]}"; do
  context=$(basename "$list" .list)
  key=$({ grep -v '^//' "$work/$context.prelude" || true; } | md5sum | cut -c1-8)
  unit_of[$key]="${unit_of[$key]:-} $context"
done
# worker.hpp of the job server's example (docs/job_server.md) is included as its trainers do.
flags=(-std=c++20 -fsyntax-only -Wall -Wextra -Wpedantic -Werror -Wno-unused-variable
       -Wno-unused-but-set-variable -Wno-unused-parameter -I"$source/include" -I"$source/examples/01_job_server")
# Compiles one unit (its contexts: $@) and writes what it found to $unit.report. A context
# with a line `// NEEDS: <header> ...` is left out (reported `skip`) where one is not found.
compile_unit() {
  local unit="$work/$1.cpp" c h doc first last missing kept=()
  : > "$unit.report"
  rm -f "$unit.passed"
  for c in "$@"; do
    missing=""
    for h in $(sed -n 's|^// NEEDS: ||p' "$here/contexts/$c.cpp"); do
      printf '#if !__has_include(%s)\n#error\n#endif\n' "$h" | "$cxx" -x c++ -fsyntax-only - 2> /dev/null ||
        missing="$missing $h"
    done
    if [ -z "$missing" ]; then kept+=("$c"); continue; fi
    while IFS=: read -r doc first last; do
      echo "skip $doc:$first in context $c (not found:$missing)"
    done < "$work/$c.list" >> "$unit.report"
  done
  [ ${#kept[@]} -gt 0 ] || { touch "$unit.passed"; return 0; }
  set -- "${kept[@]}"
  { printf '#line 1 "%s"\n' "$here/contexts/$1.cpp"
    cat "$work/$1.prelude"
    for c in "$@"; do cat "$work/$c.includes" 2>/dev/null || true; done
    for c in "$@"; do cat "$work/$c.part"; done; } > "$unit"
  if "$cxx" "${flags[@]}" "$unit" 2> "$unit.log"; then
    for c in "$@"; do
      while IFS=: read -r doc first last; do echo "ok   $doc:$first in context $c"; done < "$work/$c.list"
    done >> "$unit.report"
    touch "$unit.passed"
    return 0
  fi
  # A snippet fails when a message names one of its lines; the unit's whole log follows.
  for c in "$@"; do
    while IFS=: read -r doc first last; do
      if grep -Eo "^$doc:[0-9]+:" "$unit.log" | cut -d: -f2 |
           awk -v a="$first" -v b="$last" '$1 >= a && $1 <= b { found = 1 } END { exit !found }'; then
        echo "FAIL $doc:$first in context $c"
      else
        echo "?    $doc:$first in context $c (compiled in one unit with a failing snippet)"
      fi
    done < "$work/$c.list"
  done >> "$unit.report"
  { echo "     $unit (contexts: $*):"; sed 's/^/     /' "$unit.log" | head -60; } >> "$unit.report"
  return 1
}
# A unit passed when it leaves $unit.passed (statuses of background jobs being awkward to
# collect once `wait -n` has taken some).
jobs=$(nproc 2> /dev/null || echo 2)
firsts=()
for key in $(printf '%s\n' "${!unit_of[@]}" | sort); do
  read -r -a members <<< "${unit_of[$key]}"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  compile_unit "${members[@]}" &
  firsts+=("${members[0]}")
done
wait || true
failed=0
for first in "${firsts[@]}"; do
  cat "$work/$first.cpp.report" 2> /dev/null || echo "FAIL the unit of context $first: no report"
  [ -e "$work/$first.cpp.passed" ] || failed=1
done
exit $failed
