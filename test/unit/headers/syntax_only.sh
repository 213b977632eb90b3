#!/bin/sh
# Compiler launcher for the per-header checks: runs the compile as the front end only
# (-fsyntax-only: parsing and template instantiation, no code), then leaves the empty
# object file the build expects. Self-containment is the front end's business; the
# dependency file is still written. A precompiled header is compiled as it is.
out=
prev=
for arg in "$@"; do
  [ "$prev" = "-o" ] && out=$arg
  prev=$arg
done
case $out in *.gch | *.pch) exec "$@" ;; esac
"$@" -fsyntax-only || exit
if [ -n "$out" ]; then : > "$out"; fi
