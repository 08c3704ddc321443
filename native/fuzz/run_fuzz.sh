#!/usr/bin/env bash
# Fuzz the RTP/RTCP parser and the SRTP receive path with libFuzzer for SECONDS (default 60):
#     native/fuzz/run_fuzz.sh [SECONDS]
# Seeds come from native/fuzz/corpus/rtp (committed, made by make_corpus.py); inputs the
# fuzzer finds go to native/fuzz/corpus-run/rtp and crashes to native/fuzz/build/ (both
# ignored by git). Exits nonzero on a crash, sanitizer report or build failure.
set -euo pipefail

seconds="${1:-60}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$here/../src"
out="$here/build"
run_corpus="$here/corpus-run/rtp"
mkdir -p "$out" "$run_corpus"

clang -g -O1 -std=gnu11 -Wall -Wextra -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=all -fno-omit-frame-pointer -I"$src" \
    "$here/fuzz_rtp.c" "$src/rtp.c" "$src/g711.c" "$src/g722.c" "$src/jb_opus.c" \
    "$src/srtp_rx.c" -o "$out/fuzz_rtp" -lopus -lcrypto

"$out/fuzz_rtp" -max_total_time="$seconds" -print_final_stats=1 -max_len=2048 \
    -artifact_prefix="$out/" "$run_corpus" "$here/corpus/rtp"
