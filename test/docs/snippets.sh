#!/usr/bin/env bash
# Compiles the documentation's code blocks that are marked to be: a line
#   <!-- compiled: CONTEXT -->
# right before a ```cpp fence puts the block into contexts/CONTEXT.cpp, its leading
# #include, `using namespace` and namespace-alias lines at `// SNIPPET_HEAD`, the rest at
# `// SNIPPET`, and compiles that as a user would (-Wall -Wextra -Wpedantic -Werror;
# unused names allowed, snippets being excerpts). Found by a black-box test: a snippet
# that did not compile, and one that broke a user's -Wextra build.
# Usage: snippets.sh CXX SOURCE_DIR WORK_DIR
set -euo pipefail
cxx=$1 source=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
rm -f "$work"/*.cpp
shopt -s nullglob
for doc in "$source"/README.md "$source"/docs/*.md "$source"/docs/*/*.md; do
  awk -v doc="${doc#"$source"/}" -v work="$work" '
    function flush() {
      name = doc; gsub(/[^A-Za-z0-9]/, "_", name)
      out = work "/" name "_" start ".cpp"
      print "// " doc ":" start " in context " context > out
      while ((getline line < ctxfile) > 0) {
        if (line ~ /^\/\/ SNIPPET_HEAD$/) printf "%s", head > out
        else if (line ~ /^\/\/ SNIPPET$/) printf "%s", body > out
        else print line > out
      }
      close(ctxfile); close(out)
    }
    /^<!-- compiled: [a-z_]+ -->$/ { context = $3; ctxfile = CONTEXTS "/" context ".cpp"; armed = 1; next }
    armed && /^```cpp$/ { inside = 1; armed = 0; start = NR + 1; head = ""; body = ""; inhead = 1; next }
    { armed = 0 }
    inside && /^```$/ { inside = 0; flush(); next }
    inside {
      if (inhead && ($0 ~ /^#include / || $0 ~ /^using namespace / || $0 ~ /^namespace [a-z_]+ = / || $0 ~ /^$/)) head = head $0 "\n"
      else { inhead = 0; body = body $0 "\n" }
    }
  ' CONTEXTS="$here/contexts" "$doc"
done
files=("$work"/*.cpp)
if [ ${#files[@]} -eq 0 ]; then echo "no marked snippet found" >&2; exit 1; fi
failed=0
for f in "${files[@]}"; do
  if "$cxx" -std=c++20 -fsyntax-only -Wall -Wextra -Wpedantic -Werror -Wno-unused-variable \
       -Wno-unused-but-set-variable -Wno-unused-parameter -I"$source/include" "$f" 2> "$f.log"; then
    echo "ok   $(head -1 "$f" | cut -c4-)"
  else
    echo "FAIL $(head -1 "$f" | cut -c4-)"; sed 's/^/     /' "$f.log" | head -40; failed=1
  fi
done
exit $failed
