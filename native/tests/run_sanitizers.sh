#!/usr/bin/env bash
# Build every native/src/*.c with every native/tests/*.c under ASan + UBSan and run the
# tests. Extra arguments go to the test binary (a substring filter, e.g. "rtcp").
# Exits nonzero if the build fails, any test fails, or a sanitizer reports an error.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$here/../src"
out="$here/build"
mkdir -p "$out"

if command -v clang >/dev/null 2>&1; then cc=clang; else cc=gcc; fi
cflags=(-g -O1 -std=gnu11 -Wall -Wextra -fsanitize=address,undefined
        -fno-omit-frame-pointer -fno-sanitize-recover=all -pthread)

shopt -s nullglob
sources=("$src"/*.c "$here"/*.c)
echo "run_sanitizers: $cc, ${#sources[@]} sources"
"$cc" "${cflags[@]}" -I"$src" -I"$here" "${sources[@]}" -o "$out/test_native" -lopus -lcrypto -lm

export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
"$out/test_native" "$@"
