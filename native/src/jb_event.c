/* Telephone-events that arrive without RTP sequence numbers of their own: a transport
 * that reports digits as text (Twilio `dtmf`, AudioSocket DTMF frames) hands them in
 * as RFC 4733 payloads. They reach the same keyed tracker as RTP events but bypass the
 * RFC 3550 sequence state, which belongs to the leg's audio packets. */
#include "jb_internal.h"

int cs_jb_insert_event(cs_jb *jb, const uint8_t *payload, uint32_t len, uint32_t ts,
                       uint32_t clock_rate, int64_t now_ns) {
    jb->st.packets_received++;
    if (jb->paused) {
        jb->st.packets_paused++;
        return CS_PKT_PAUSED;
    }
    int r = cs_dtmf_packet(&jb->dtmf, payload, len, ts, clock_rate ? clock_rate : 8000, -1,
                           now_ns);
    if (r < 0) {
        jb->st.packets_bad_payload++;
        return CS_PKT_BAD_PAYLOAD;
    }
    jb->st.packets_dtmf++;
    jb->st.dtmf_events += (uint64_t)r;
    return CS_PKT_DTMF;
}
