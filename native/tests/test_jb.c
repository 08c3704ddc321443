/* Jitter-buffer tests in C, so the buffer itself runs under ASan/UBSan: scenarios that
 * touch every ring path (wrap, overflow, restart, SSRC change, pause) and a long
 * pseudo-random schedule of valid and hostile packets checked for conservation. */
#include <errno.h>
#include <string.h>

#include "cs_test.h"
#include "jb.h"

#define MS 1000000LL

static size_t make_rtp(uint8_t *buf, uint8_t pt, uint16_t seq, uint32_t ts, uint32_t ssrc,
                       size_t payload_len, uint8_t fill) {
    buf[0] = 0x80;
    buf[1] = pt;
    buf[2] = (uint8_t)(seq >> 8);
    buf[3] = (uint8_t)seq;
    buf[4] = (uint8_t)(ts >> 24);
    buf[5] = (uint8_t)(ts >> 16);
    buf[6] = (uint8_t)(ts >> 8);
    buf[7] = (uint8_t)ts;
    buf[8] = (uint8_t)(ssrc >> 24);
    buf[9] = (uint8_t)(ssrc >> 16);
    buf[10] = (uint8_t)(ssrc >> 8);
    buf[11] = (uint8_t)ssrc;
    memset(buf + 12, fill, payload_len);
    return 12 + payload_len;
}

static cs_jb *new_default(void) {
    cs_jb_config cfg;
    cs_jb_default_config(&cfg);
    cfg.dtmf_key = 99;
    return cs_jb_new(&cfg);
}

static void test_jb_rejects_bad_config(void) {
    cs_jb_config cfg;
    cs_jb_default_config(&cfg);
    cfg.out_rate = 44100; /* not a whole number of samples per 2.5 ms unit */
    CHECK(cs_jb_new(&cfg) == NULL);
    cs_jb_default_config(&cfg);
    cfg.pts[0].clock_rate = 16000; /* PCMU runs an 8 kHz clock */
    CHECK(cs_jb_new(&cfg) == NULL);
    cs_jb_default_config(&cfg);
    cfg.min_delay_ms = 500;
    cfg.max_delay_ms = 100;
    CHECK(cs_jb_new(&cfg) == NULL);
    cs_jb_default_config(&cfg);
    cfg.n_pts = 17;
    CHECK(cs_jb_new(&cfg) == NULL);
}

/* An ideal stream that wraps both the sequence number and the timestamp. */
static void test_jb_ideal_with_wraps(void) {
    cs_jb *jb = new_default();
    REQUIRE(jb != NULL);
    uint8_t pkt[256];
    int16_t pcm[160];
    cs_frame_info info;
    int normal = 0;
    int64_t last_pos = -1;
    for (int i = 0; i < 500; i++) {
        size_t n = make_rtp(pkt, 0, (uint16_t)(65400 + i), 0xFFFFF000u + (uint32_t)i * 160u,
                            42, 160, (uint8_t)(i & 0x7F));
        CHECK(cs_jb_insert_datagram(jb, pkt, n, i * 20 * MS + 3 * MS) > 0);
        int flag = cs_jb_pull(jb, i * 20 * MS + 10 * MS, pcm, &info);
        if (flag == CS_FRAME_NORMAL) {
            normal++;
            CHECK(info.pos > last_pos);
            last_pos = info.pos;
        }
    }
    const cs_jb_stats *st = cs_jb_get_stats(jb);
    CHECK_EQ(st->restarts, 0);
    CHECK_EQ(st->resyncs, 0);
    CHECK_EQ(st->packets_late, 0);
    CHECK_EQ(st->packets_lost, 0);
    CHECK(normal >= 490);
    cs_jb_free(jb);
}

static void test_jb_overflow_and_restart(void) {
    cs_jb *jb = new_default();
    REQUIRE(jb != NULL);
    uint8_t pkt[256];
    int16_t pcm[160];
    cs_frame_info info;
    /* 10 s of audio delivered at one instant: more than the ring holds */
    for (int i = 0; i < 500; i++) {
        size_t n = make_rtp(pkt, 0, (uint16_t)i, (uint32_t)i * 160u, 7, 160, 1);
        cs_jb_insert_datagram(jb, pkt, n, 1000 * MS);
    }
    const cs_jb_stats *st = cs_jb_get_stats(jb);
    CHECK(st->flushes >= 1);
    CHECK(st->units_accepted - st->units_flushed <= 1024);
    /* a confirmed sequence restart, then an SSRC change */
    size_t n = make_rtp(pkt, 0, 40000, 5, 7, 160, 2);
    CHECK_EQ(cs_jb_insert_datagram(jb, pkt, n, 1001 * MS), CS_PKT_JUMP);
    n = make_rtp(pkt, 0, 40001, 165, 7, 160, 2);
    CHECK_EQ(cs_jb_insert_datagram(jb, pkt, n, 1002 * MS), CS_PKT_RESTART);
    n = make_rtp(pkt, 0, 3, 77, 8, 160, 2);
    CHECK_EQ(cs_jb_insert_datagram(jb, pkt, n, 1003 * MS), CS_PKT_SSRC_CHANGE);
    for (int i = 0; i < 300; i++) cs_jb_pull(jb, 1003 * MS + i * 20 * MS, pcm, &info);
    CHECK_EQ(st->restarts, 1);
    CHECK_EQ(st->ssrc_changes, 1);
    cs_jb_free(jb);
}

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Long random schedule of valid, reordered, duplicated, malformed and hostile packets
 * (random payload types, lengths, timestamps, SSRCs), pauses and pulls. */
static void test_jb_random_schedule_conserves_packets(void) {
    cs_jb_config cfg;
    cs_jb_default_config(&cfg);
    cfg.pts[cfg.n_pts++] = (cs_pt_entry){96, CS_CODEC_L16, 2, 0, 8000};
    cs_jb *jb = cs_jb_new(&cfg);
    REQUIRE(jb != NULL);
    uint64_t rng = 12345;
    uint8_t pkt[2048];
    int16_t pcm[160];
    cs_frame_info info;
    uint64_t accepted = 0;
    int64_t now = 0;
    uint16_t seq = 100;
    uint32_t ts = 1000;
    for (int step = 0; step < 200000; step++) {
        now += (int64_t)(lcg(&rng) % 3) * MS;
        uint64_t r = lcg(&rng) % 100;
        size_t n;
        if (r < 70) {
            n = make_rtp(pkt, (lcg(&rng) % 8) ? 0 : 8, seq, ts, 1, 160, (uint8_t)r);
            seq++;
            ts += 160;
        } else if (r < 80) {
            n = make_rtp(pkt, 0, (uint16_t)(seq - lcg(&rng) % 50), ts - (uint32_t)(lcg(&rng) % 50) * 160,
                         1, 160 * (1 + lcg(&rng) % 3), 3);
        } else if (r < 85) {
            n = make_rtp(pkt, 101, seq++, ts, 1, 4, 0);
            pkt[12] = (uint8_t)(lcg(&rng) % 20);
        } else if (r < 90) {
            n = make_rtp(pkt, (uint8_t)(lcg(&rng) % 128), (uint16_t)lcg(&rng), (uint32_t)lcg(&rng),
                         (uint32_t)(lcg(&rng) % 3), lcg(&rng) % 1500, 5);
        } else if (r < 93) {
            n = make_rtp(pkt, 96, seq++, ts, 1, 80, 9); /* L16 stereo, 2.5 ms */
            ts += 20;
        } else {
            n = lcg(&rng) % 64;
            for (size_t i = 0; i < n; i++) pkt[i] = (uint8_t)lcg(&rng);
        }
        int outcome = cs_jb_insert_datagram(jb, pkt, n, now);
        if (outcome == CS_PKT_IN_ORDER || outcome == CS_PKT_GAP || outcome == CS_PKT_REORDERED ||
            outcome == CS_PKT_RESTART || outcome == CS_PKT_SSRC_CHANGE)
            accepted++;
        if (lcg(&rng) % 10 == 0) cs_jb_pull(jb, now, pcm, &info);
        if (lcg(&rng) % 5000 == 0) cs_jb_set_paused(jb, 1);
        if (lcg(&rng) % 1000 == 0) cs_jb_set_paused(jb, 0);
        cs_dtmf_event ev[4];
        cs_jb_take_dtmf(jb, ev, 4);
    }
    cs_jb_set_paused(jb, 0);
    for (int i = 0; i < 400; i++) cs_jb_pull(jb, now + i * 20 * MS, pcm, &info);
    const cs_jb_stats *st = cs_jb_get_stats(jb);
    /* drained: every accepted audio packet was played, flushed or dropped. DTMF and CN
     * outcomes are not audio; an accepted outcome always stored at least one unit. */
    CHECK_EQ(accepted, st->packets_played + st->packets_flushed + st->packets_dropped);
    CHECK_EQ(st->units_accepted, st->units_played + st->units_flushed + st->units_dropped);
    cs_jb_free(jb);
}

/* A telephone-event payload (RFC 4733): event, end bit, volume 10, duration. */
static size_t make_event(uint8_t *buf, uint8_t pt, uint16_t seq, uint32_t ts, uint8_t event,
                         int end, uint16_t duration) {
    size_t n = make_rtp(buf, pt, seq, ts, 42, 4, 0);
    buf[12] = event;
    buf[13] = (uint8_t)((end ? 0x80 : 0) | 10);
    buf[14] = (uint8_t)(duration >> 8);
    buf[15] = (uint8_t)duration;
    return n;
}

/* cs_jb_set_pts: a table that renumbers PCMU and moves telephone-event replaces the old
 * one in place. Counters and the sequence state go on (no restart, no payload-type
 * change, no concealment), audio buffered under the old PCMU number plays, the new
 * numbers are decoded and counted, the old ones are unknown. Tables the buffer was not
 * built for, bad tables and audio buffered under an entry the new table lacks are
 * refused with nothing changed. */
static void test_jb_set_pts_in_place(void) {
    cs_jb *jb = new_default();
    REQUIRE(jb != NULL);
    uint8_t pkt[256];
    int16_t pcm[160];
    cs_frame_info info;
    uint16_t seq = 100;
    uint32_t ts = 16000;
    int64_t t = 0;
    for (int i = 0; i < 10; i++, seq++, ts += 160) /* 200 ms buffered ahead */
        CHECK_EQ(cs_jb_insert_datagram(jb, pkt, make_rtp(pkt, 0, seq, ts, 42, 160, 0x11), t),
                 CS_PKT_IN_ORDER);
    for (int i = 0; i < 5; i++, t += 20 * MS)
        cs_jb_pull(jb, t, pcm, &info);
    uint64_t received = cs_jb_get_stats(jb)->packets_received;

    cs_pt_entry renumbered[] = {
        {96, CS_CODEC_PCMU, 1, 0, 8000},
        {8, CS_CODEC_PCMA, 1, 0, 8000},
        {97, CS_CODEC_TELEPHONE_EVENT, 1, 0, 8000},
    };
    cs_pt_entry wide[] = {{96, CS_CODEC_L16, 1, 0, 16000}}; /* 80 bytes a unit, ring has 20 */
    cs_pt_entry opus[] = {{111, CS_CODEC_OPUS, 2, 0, 48000}};
    cs_pt_entry dup[] = {{96, CS_CODEC_PCMU, 1, 0, 8000}, {96, CS_CODEC_PCMA, 1, 0, 8000}};
    cs_pt_entry events_only[] = {{97, CS_CODEC_TELEPHONE_EVENT, 1, 0, 8000}};
    cs_pt_entry pcma_only[] = {{8, CS_CODEC_PCMA, 1, 0, 8000}};
    CHECK_EQ(cs_jb_set_pts(jb, wide, 1), -EOPNOTSUPP);
    CHECK_EQ(cs_jb_set_pts(jb, opus, 1), -EOPNOTSUPP);
    CHECK_EQ(cs_jb_set_pts(jb, dup, 2), -EINVAL);
    CHECK_EQ(cs_jb_set_pts(jb, events_only, 1), -EINVAL); /* no audio */
    CHECK_EQ(cs_jb_set_pts(jb, renumbered, 0), -EINVAL);
    CHECK_EQ(cs_jb_set_pts(jb, pcma_only, 1), -EBUSY); /* PCMU audio is buffered */
    CHECK_EQ(cs_jb_get_stats(jb)->payload_table_updates, 0);
    /* refused: PT 0 still decodes */
    CHECK_EQ(cs_jb_insert_datagram(jb, pkt, make_rtp(pkt, 0, seq++, ts, 42, 160, 0x11), t),
             CS_PKT_IN_ORDER);
    ts += 160;

    CHECK_EQ(cs_jb_set_pts(jb, renumbered, 3), 0);
    const cs_jb_stats *st = cs_jb_get_stats(jb);
    CHECK_EQ(st->payload_table_updates, 1);
    CHECK_EQ(st->packets_received, received + 1); /* kept, not a new buffer */
    /* the same source goes on under PCMU's new number: in order, no restart */
    for (int i = 0; i < 20; i++, seq++, ts += 160, t += 20 * MS) {
        CHECK_EQ(cs_jb_insert_datagram(jb, pkt, make_rtp(pkt, 96, seq, ts, 42, 160, 0x11), t),
                 CS_PKT_IN_ORDER);
        CHECK_EQ(cs_jb_pull(jb, t, pcm, &info), CS_FRAME_NORMAL); /* no gap at the change */
    }
    CHECK_EQ(cs_jb_insert_datagram(jb, pkt, make_rtp(pkt, 0, seq++, ts, 42, 160, 0), t),
             CS_PKT_UNKNOWN_PT); /* the old number is gone */
    CHECK_EQ(cs_jb_insert_datagram(jb, pkt, make_event(pkt, 101, seq++, ts, 5, 1, 800), t),
             CS_PKT_UNKNOWN_PT);
    CHECK_EQ(cs_jb_insert_datagram(jb, pkt, make_event(pkt, 97, seq++, ts, 5, 1, 800), t),
             CS_PKT_DTMF);
    CHECK_EQ(st->restarts, 0);
    CHECK_EQ(st->ssrc_changes, 0);
    CHECK_EQ(st->payload_type_changes, 0); /* PCMU under 0 then 96 is one codec */
    CHECK_EQ(st->concealment_events, 0);
    CHECK_EQ(st->packets_unknown_pt, 2);
    CHECK_EQ(st->packets_dtmf, 1);
    CHECK_EQ(st->dtmf_events, 1);
    CHECK_EQ(st->packets_in_order, 31);
    CHECK_EQ(st->concealed_samples, 0);

    /* once the PCMU audio has played out, a table without PCMU is taken */
    for (int i = 0; i < 30; i++, t += 20 * MS)
        cs_jb_pull(jb, t, pcm, &info);
    CHECK_EQ(cs_jb_set_pts(jb, pcma_only, 1), 0);
    CHECK_EQ(st->payload_table_updates, 2);
    /* a second update before any audio: the last audio's codec is already gone (it must
     * stay gone, not be looked up past the old table: ASan reads the stack map) */
    cs_pt_entry pcma_and_events[] = {
        {8, CS_CODEC_PCMA, 1, 0, 8000},
        {97, CS_CODEC_TELEPHONE_EVENT, 1, 0, 8000},
    };
    CHECK_EQ(cs_jb_set_pts(jb, pcma_and_events, 2), 0);
    CHECK_EQ(st->payload_table_updates, 3);
    CHECK_EQ(cs_jb_insert_datagram(jb, pkt, make_rtp(pkt, 8, seq++, ts, 42, 160, 0x22), t),
             CS_PKT_IN_ORDER);
    CHECK_EQ(st->payload_type_changes, 1); /* PCMU -> PCMA is a change */
    cs_jb_free(jb);
}

static const cs_test_case jb_cases[] = {
    {"rejects_bad_config", test_jb_rejects_bad_config},
    {"ideal_with_wraps", test_jb_ideal_with_wraps},
    {"overflow_and_restart", test_jb_overflow_and_restart},
    {"random_schedule_conserves_packets", test_jb_random_schedule_conserves_packets},
    {"set_pts_in_place", test_jb_set_pts_in_place},
};
const cs_test_suite cs_suite_jb = {"jb", jb_cases, CS_TEST_COUNT(jb_cases)};
