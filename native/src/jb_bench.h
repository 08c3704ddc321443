/* Replay of a packet trace through one jitter buffer, timed per operation inside C.
 *
 * For `callshield bench jitter`: the same merge as native/sim.py (before each pull at
 * pull_ns[j], insert every packet that arrived at or before it), with each insert and
 * each pull timed inside C (the TSC on x86, calibrated against CLOCK_MONOTONIC over the
 * replay; clock_gettime elsewhere), so the cost is measured without the Python->C call.
 * Allocates nothing; every array is the caller's.
 */
#ifndef CS_JB_BENCH_H
#define CS_JB_BENCH_H

#include "jb.h"

/* CDEF BEGIN */
/* Packet i is data[offsets[i] .. offsets[i] + lengths[i]), arriving at arrival_ns[i]
 * (non-decreasing). pcm holds one frame (cs_jb_samples_per_frame samples). Per packet:
 * insert_cost_ns[i] and outcomes[i] (cs_jb_insert_datagram's return); per pull:
 * pull_cost_ns[j] and flags[j]. Packets arriving after the last pull are not inserted.
 * insert_cost_ns and pull_cost_ns both NULL: untimed (the caller times the whole replay).
 * Returns the number of packets inserted. */
size_t cs_jb_bench_replay(cs_jb *jb, const uint8_t *data, const uint64_t *offsets,
                          const uint32_t *lengths, const int64_t *arrival_ns, size_t n_packets,
                          const int64_t *pull_ns, size_t n_pulls, int16_t *pcm,
                          int64_t *insert_cost_ns, int8_t *outcomes, int64_t *pull_cost_ns,
                          uint8_t *flags);
/* n back-to-back readings of the per-op timer: out[i] (ns) is one timed empty op. */
void cs_bench_clock_overhead(int64_t *out, size_t n);
/* CDEF END */

#endif
