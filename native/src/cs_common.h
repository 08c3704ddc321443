/* Shared constants of the CallShield native media core.
 *
 * Everything between the CDEF markers is also read by cffi (native/build_native.py),
 * so it must stay plain C declarations: no #include, no macros with expressions. */
#ifndef CS_COMMON_H
#define CS_COMMON_H

#include <stdint.h>
#include <stddef.h>

/* CDEF BEGIN */
/* Output frame flags: what a pulled 20 ms frame carries. */
enum {
    CS_FRAME_NOT_STARTED = 0, /* no packet yet, or still prefetching to the target delay */
    CS_FRAME_NORMAL = 1,      /* every sample is decoded from received audio */
    CS_FRAME_CONCEALED = 2,   /* some or all samples are concealment (loss, underrun) */
    CS_FRAME_CNG = 3,         /* comfort noise / DTX: the sender said "silence" */
    CS_FRAME_PAUSED = 4       /* analysis paused (secure pause): audio discarded, not loss */
};

/* Codecs the payload-type table can name. */
enum {
    CS_CODEC_NONE = 0,
    CS_CODEC_PCMU = 1,
    CS_CODEC_PCMA = 2,
    CS_CODEC_L16 = 3,          /* network byte order on RTP */
    CS_CODEC_CN = 4,           /* RFC 3389 comfort noise */
    CS_CODEC_TELEPHONE_EVENT = 5, /* RFC 4733 */
    CS_CODEC_L16LE = 6,        /* L16 in little-endian order (AudioSocket, audio_fork) */
    CS_CODEC_G722 = 7,         /* 64 kbit/s; RTP clock 8000 over 16 kHz audio */
    CS_CODEC_OPUS = 8          /* RTP clock 48000; libopus, PLC and in-band FEC */
};

/* cs_pt_entry.flags */
enum {
    CS_PT_NO_FEC = 1           /* Opus: conceal loss with PLC only, never in-band FEC */
};
/* CDEF END */

/* Time quantum of the jitter buffer: 2.5 ms, the smallest Opus frame; every common
 * ptime (10, 20, 30, 40, 60 ms) is a whole number of units. */
#define CS_UNITS_PER_SECOND 400
#define CS_UNITS_PER_FRAME 8 /* 20 ms output frames */

/* The per-packet path (RTP parse, jitter-buffer insert and pull, G.711 decode) is marked
 * hot: GCC and Clang place it in .text.hot, together, so a packet's code spans a few
 * adjacent pages and lines instead of a stretch of each source file. Where a receiver
 * switches between legs and other work evicts the code, fewer pages and lines to fetch. */
#if defined(__GNUC__)
#define CS_HOT __attribute__((hot))
#else
#define CS_HOT
#endif

#endif
