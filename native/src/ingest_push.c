/* Pushed streams: legs whose packets do not come from a UDP socket but from an adapter
 * in the media process (WebRTC after SRTP, media WebSockets, AudioSocket). They live in
 * the same table, are pulled by the same batch call and count the same per-stream
 * counters; the adapter's thread inserts under the stream mutex, exactly like the
 * receiver thread does for socket legs. The source lock does not apply: the adapter has
 * authenticated its transport. */
#define _GNU_SOURCE
#include "ingest_priv.h"
#include "jb_internal.h"

#include <errno.h>
#include <string.h>

int32_t cs_ingest_add_stream_push(cs_ingest *ing, const cs_jb_config *jb_cfg) {
    cs_jb_config def;
    if (!jb_cfg) {
        cs_jb_default_config(&def);
        jb_cfg = &def;
    }
    cs_jb *jb = cs_jb_new(jb_cfg);
    if (!jb)
        return -EINVAL;
    pthread_mutex_lock(&ing->table_mu);
    uint32_t slot = 0;
    while (slot < ing->cfg.max_streams && ing->streams[slot].active)
        slot++;
    if (slot == ing->cfg.max_streams) {
        pthread_mutex_unlock(&ing->table_mu);
        cs_jb_free(jb);
        return -ENOSPC;
    }
    ingest_slot *s = &ing->streams[slot];
    pthread_mutex_lock(&s->mu);
    s->gen = (uint16_t)(s->gen % 0x7FFF + 1);
    s->fd = -1;
    s->shared = -1;
    s->pushed = 1;
    s->nkeys = 0;
    s->jb = jb;
    cs_srclock_init(&s->lock, NULL);
    memset(&s->c, 0, sizeof s->c);
    s->active = 1;
    int32_t id = MAKE_ID(s->gen, slot);
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_unlock(&ing->table_mu);
    return id;
}

/* Under the stream mutex: count, then insert a parsed header. */
static int insert_locked(ingest_slot *s, const cs_rtp_header *h, size_t bytes,
                         int64_t arrival_ns) {
    s->c.datagrams++;
    s->c.bytes += bytes;
    s->c.last_arrival_ns = arrival_ns;
    if (!s->c.first_arrival_ns)
        s->c.first_arrival_ns = arrival_ns;
    int out = cs_jb_insert(s->jb, h, arrival_ns);
    s->c.outcomes[out > 0 && out < CS_PKT_OUTCOMES ? out : 0]++;
    s->c.inserted++;
    return out;
}

static ingest_slot *lock_pushed(cs_ingest *ing, int32_t id) {
    if (id < 0 || STREAM_SLOT(id) >= ing->cfg.max_streams)
        return NULL;
    ingest_slot *s = &ing->streams[STREAM_SLOT(id)];
    pthread_mutex_lock(&s->mu);
    if (s->active && s->pushed && s->gen == STREAM_GEN(id))
        return s;
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int cs_ingest_push(cs_ingest *ing, int32_t id, const uint8_t *data, size_t len,
                   int64_t arrival_ns) {
    ingest_slot *s = lock_pushed(ing, id);
    if (!s)
        return -ENOENT;
    cs_rtp_header h;
    int rc = cs_rtp_parse(data, len, &h);
    int out;
    if (rc != CS_RTP_OK) {
        s->c.datagrams++;
        s->c.bytes += len;
        s->c.last_arrival_ns = arrival_ns;
        if (!s->c.first_arrival_ns)
            s->c.first_arrival_ns = arrival_ns;
        s->c.parse_errors[rc > 0 && rc < CS_RTP_ERR_COUNT ? rc : 0]++;
        out = 0;
    } else {
        out = insert_locked(s, &h, len, arrival_ns);
    }
    pthread_mutex_unlock(&s->mu);
    return out;
}

int cs_ingest_push_payload(cs_ingest *ing, int32_t id, uint8_t payload_type, uint16_t seq,
                           uint32_t ts, uint32_t ssrc, int marker, const uint8_t *payload,
                           size_t len, int64_t arrival_ns) {
    if (payload_type > 127)
        return -EINVAL;
    ingest_slot *s = lock_pushed(ing, id);
    if (!s)
        return -ENOENT;
    cs_rtp_header h;
    memset(&h, 0, sizeof h);
    h.marker = marker ? 1 : 0;
    h.payload_type = payload_type;
    h.seq = seq;
    h.ts = ts;
    h.ssrc = ssrc;
    h.header_len = 12;
    h.payload_len = (uint32_t)len;
    h.payload = payload;
    int out = insert_locked(s, &h, len + 12, arrival_ns);
    pthread_mutex_unlock(&s->mu);
    return out;
}

int cs_ingest_push_event(cs_ingest *ing, int32_t id, const uint8_t *payload, size_t len,
                         uint32_t ts, uint32_t clock_rate, int64_t arrival_ns) {
    ingest_slot *s = lock_pushed(ing, id);
    if (!s)
        return -ENOENT;
    int out = cs_jb_insert_event(s->jb, payload, (uint32_t)len, ts, clock_rate, arrival_ns);
    s->c.outcomes[out > 0 && out < CS_PKT_OUTCOMES ? out : 0]++;
    pthread_mutex_unlock(&s->mu);
    return out;
}
