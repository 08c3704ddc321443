/* The codec matrix of the jitter buffer under ASan/UBSan: G.722 against a libavcodec
 * reference, L16 at every rate and in both byte orders through the ring (equal to the
 * resampler applied to the whole stream at once), G.722 restarting after loss, Opus
 * equal to libopus decoding the same packets, Opus FEC and PLC on loss, DTX frames, and
 * hostile Opus payloads. */
#include <math.h>
#include <opus/opus.h>
#include <stdlib.h>
#include <string.h>

#include "cs_opus.h"
#include "cs_test.h"
#include "g722.h"
#include "jb.h"
#include "resample.h"

#define MS 1000000LL

static size_t rtp(uint8_t *buf, uint8_t pt, uint16_t seq, uint32_t ts, const uint8_t *payload,
                  size_t len) {
    buf[0] = 0x80;
    buf[1] = pt;
    cs_put16(buf + 2, seq);
    cs_put32(buf + 4, ts);
    cs_put32(buf + 8, 0x51C0DEC5u);
    memcpy(buf + 12, payload, len);
    return 12 + len;
}

static cs_jb *jb_for(uint8_t codec, uint32_t clock, uint8_t channels, uint32_t out_rate,
                     uint8_t flags) {
    cs_jb_config cfg;
    cs_jb_default_config(&cfg);
    cfg.out_rate = out_rate;
    cfg.n_pts = 2;
    cfg.pts[0] = (cs_pt_entry){96, codec, channels, flags, clock};
    cfg.pts[1] = (cs_pt_entry){13, CS_CODEC_CN, 1, 0, 8000};
    return cs_jb_new(&cfg);
}

/* Feed packets at an ideal 20 ms cadence (skipping those with drop[i]) and pull every
 * 20 ms, then up to `extra` more pulls while audio is buffered (no underrun at the end);
 * the audio of every emitted frame (after the prefetch) goes to out. Returns the number
 * of samples written. */
typedef struct {
    uint8_t **payload;
    size_t *len;
    uint32_t ticks; /* RTP ticks per packet */
    int n;
} stream;

static size_t play(cs_jb *jb, const stream *s, const uint8_t *drop, int16_t *out, int extra) {
    uint8_t pkt[4096];
    int16_t pcm[960];
    cs_frame_info info;
    size_t n_out = 0;
    int started = 0;
    for (int i = 0; i < s->n + extra; i++) {
        int64_t t = i * 20 * MS;
        if (i >= s->n && cs_jb_get_stats(jb)->buffer_level_ms <= 20) break; /* drained */
        if (i < s->n && !(drop && drop[i])) {
            size_t n = rtp(pkt, 96, (uint16_t)(100 + i), 1000u + (uint32_t)i * s->ticks,
                           s->payload[i], s->len[i]);
            cs_jb_insert_datagram(jb, pkt, n, t + 1 * MS);
        }
        int flag = cs_jb_pull(jb, t + 10 * MS, pcm, &info);
        if (flag != CS_FRAME_NOT_STARTED) started = 1;
        if (started && flag != CS_FRAME_NOT_STARTED) {
            memcpy(out + n_out, pcm, info.samples * sizeof *pcm);
            n_out += info.samples;
        }
    }
    return n_out;
}

static void free_stream(stream *s) {
    for (int i = 0; i < s->n; i++) free(s->payload[i]);
    free(s->payload);
    free(s->len);
}

/* ---- G.722 ----------------------------------------------------------------------- */

/* 4000 xorshift32 octets decoded by libavcodec's g722 decoder hash (FNV-1a 64 over the
 * little-endian samples) to this value; the bitstream exercises every code. */
static void test_codecs_g722_matches_reference(void) {
    uint32_t st = 2463534242u;
    uint8_t bits[4000];
    for (int i = 0; i < 4000; i++) bits[i] = (uint8_t)cs_test_rng(&st);
    int16_t pcm[8000];
    cs_g722_decoder d;
    cs_g722_reset(&d);
    cs_g722_decode(&d, bits, 1500, pcm);
    cs_g722_decode(&d, bits + 1500, 2500, pcm + 3000);
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 8000; i++) {
        uint16_t v = (uint16_t)pcm[i];
        h = (h ^ (v & 0xFF)) * 0x100000001b3ull;
        h = (h ^ (v >> 8)) * 0x100000001b3ull;
    }
    CHECK(h == 0xd77bbefb963ce66full);
}

static stream g722_stream(int n_packets, uint32_t ptime_ms) {
    stream s = {calloc((size_t)n_packets, sizeof(uint8_t *)), calloc((size_t)n_packets, sizeof(size_t)),
                8 * ptime_ms, n_packets};
    uint32_t st = 99;
    for (int i = 0; i < n_packets; i++) {
        s.len[i] = 8 * ptime_ms;
        s.payload[i] = malloc(s.len[i]);
        for (size_t k = 0; k < s.len[i]; k++) s.payload[i][k] = (uint8_t)cs_test_rng(&st);
    }
    return s;
}

/* G.722 through the ring equals the decoder run on the packets; a lost packet resets
 * the decoder, so what follows equals a fresh decoder on the packets after the gap. */
static void test_codecs_g722_loss_resets(void) {
    stream s = g722_stream(60, 20);
    uint8_t drop[60] = {0};
    drop[30] = 1;
    cs_jb *jb = jb_for(CS_CODEC_G722, 8000, 1, 16000, 0);
    REQUIRE(jb != NULL);
    int16_t *got = calloc(80 * 320, sizeof *got);
    size_t n = play(jb, &s, drop, got, 20);
    CHECK(n >= 60 * 320);
    int16_t want[320];
    cs_g722_decoder d;
    cs_g722_reset(&d);
    for (int i = 0; i < 30; i++) {
        cs_g722_decode(&d, s.payload[i], 160, want);
        CHECK(memcmp(got + i * 320, want, sizeof want) == 0);
    }
    for (int k = 0; k < 320; k++) CHECK_EQ(got[30 * 320 + k], 0); /* concealed */
    cs_g722_reset(&d);
    for (int i = 31; i < 60; i++) {
        cs_g722_decode(&d, s.payload[i], 160, want);
        CHECK(memcmp(got + i * 320, want, sizeof want) == 0);
    }
    const cs_jb_stats *stt = cs_jb_get_stats(jb);
    CHECK_EQ(stt->decoder_resets, 1);
    CHECK_EQ(stt->concealed_samples, 320);
    cs_jb_free(jb);
    free(got);
    free_stream(&s);
}

/* ---- L16 ------------------------------------------------------------------------- */

static int16_t tone_sample(uint32_t rate, uint32_t i) {
    double t = (double)i / rate;
    return (int16_t)lrint(9000.0 * sin(2 * M_PI * 440.0 * t) + 3000.0 * sin(2 * M_PI * 1900.0 * t));
}

/* L16 at 8..48 kHz and 44.1 kHz, mono and stereo, both byte orders, to 8 and 16 kHz
 * legs: exactly the resampler's output for the whole stream (or the samples themselves
 * at equal rates). */
static void test_codecs_l16_rates_and_orders(void) {
    const uint32_t rates[] = {8000, 16000, 24000, 32000, 44100, 48000};
    const uint32_t outs[] = {8000, 16000};
    for (size_t r = 0; r < 6; r++)
        for (size_t o = 0; o < 2; o++)
            for (int variant = 0; variant < 3; variant++) { /* BE mono, LE mono, BE stereo */
                uint32_t rate = rates[r], out_rate = outs[o];
                uint8_t channels = variant == 2 ? 2 : 1;
                uint8_t codec = variant == 1 ? CS_CODEC_L16LE : CS_CODEC_L16;
                int n_packets = 50;
                uint32_t spp = rate / 50;
                stream s = {calloc(50, sizeof(uint8_t *)), calloc(50, sizeof(size_t)), spp, n_packets};
                int16_t *src = malloc((size_t)n_packets * spp * sizeof *src);
                for (int i = 0; i < n_packets; i++) {
                    s.len[i] = spp * 2u * channels;
                    s.payload[i] = malloc(s.len[i]);
                    for (uint32_t k = 0; k < spp; k++) {
                        int16_t v = tone_sample(rate, (uint32_t)i * spp + k);
                        src[(size_t)i * spp + k] = v;
                        for (int c = 0; c < channels; c++) {
                            /* stereo: left v + 100, right v - 100 (mean v) */
                            int16_t cv = (int16_t)(channels == 2 ? (c ? v - 100 : v + 100) : v);
                            uint8_t *p = s.payload[i] + (k * channels + (uint32_t)c) * 2;
                            p[variant == 1 ? 1 : 0] = (uint8_t)((uint16_t)cv >> 8);
                            p[variant == 1 ? 0 : 1] = (uint8_t)cv;
                        }
                    }
                }
                cs_jb *jb = jb_for(codec, rate, channels, out_rate, 0);
                REQUIRE(jb != NULL);
                size_t total_out = (size_t)n_packets * out_rate / 50;
                int16_t *got = calloc(total_out + 20 * out_rate / 50, sizeof *got);
                size_t n = play(jb, &s, NULL, got, 20);
                CHECK(n >= total_out);
                int16_t *want = malloc((total_out + 1) * sizeof *want);
                if (rate == out_rate) {
                    memcpy(want, src, total_out * sizeof *want);
                } else {
                    cs_resampler *rs = cs_resampler_new(rate, out_rate);
                    CHECK_EQ(cs_resampler_process(rs, src, (uint32_t)n_packets * spp, want), total_out);
                    cs_resampler_free(rs);
                }
                size_t bad = 0;
                for (size_t k = 0; k < total_out; k++) bad += got[k] != want[k];
                if (bad)
                    printf("  L16 %u Hz ch %u variant %d -> %u: %zu samples differ\n", rate,
                           channels, variant, out_rate, bad);
                CHECK_EQ(bad, 0);
                CHECK_EQ(cs_jb_get_stats(jb)->concealed_samples, 0);
                cs_jb_free(jb);
                free(got);
                free(want);
                free(src);
                free_stream(&s);
            }
}

static void test_codecs_reject_bad_tables(void) {
    CHECK(jb_for(CS_CODEC_G722, 16000, 1, 16000, 0) == NULL); /* G.722's RTP clock is 8000 */
    CHECK(jb_for(CS_CODEC_OPUS, 8000, 2, 8000, 0) == NULL);   /* Opus's is 48000 */
    CHECK(jb_for(CS_CODEC_OPUS, 48000, 2, 32000, 0) == NULL); /* libopus has no 32 kHz */
    CHECK(jb_for(CS_CODEC_L16, 22050, 1, 8000, 0) == NULL);   /* not on the 2.5 ms grid */
    CHECK(jb_for(CS_CODEC_PCMU, 44100, 1, 8000, 0) == NULL);  /* 44.1 kHz: L16 only */
    CHECK(jb_for(CS_CODEC_L16, 44100, 1, 48000, 0) == NULL);  /* no 147/160 resampler */
    CHECK(jb_for(CS_CODEC_L16, 16000, 3, 8000, 0) == NULL);
    cs_jb *jb = jb_for(CS_CODEC_L16, 48000, 2, 8000, 0);
    CHECK(jb != NULL);
    cs_jb_free(jb);
}

/* ---- Opus ------------------------------------------------------------------------ */

/* A voiced, speech-like signal at 16 kHz: a 140 Hz pulse train through two formant-ish
 * resonances, syllables of 200 ms with 100 ms pauses, so SILK's VAD sees activity. */
static void speechlike(int16_t *x, uint32_t n) {
    double y1 = 0, y2 = 0, z1 = 0, z2 = 0;
    for (uint32_t i = 0; i < n; i++) {
        double e = (i % 114 == 0) ? 8000.0 : 0.0;
        double y = e + 1.6 * y1 * cos(2 * M_PI * 700.0 / 16000) - 0.9 * y2;
        y2 = y1;
        y1 = y;
        double z = y + 1.4 * z1 * cos(2 * M_PI * 1800.0 / 16000) - 0.85 * z2;
        z2 = z1;
        z1 = z;
        double env = (i / 1600) % 3 == 2 ? 0.0 : sin(M_PI * (double)(i % 4800) / 3200.0);
        double v = 0.4 * z * (env > 0 ? env : 0);
        x[i] = (int16_t)(v > 32767 ? 32767 : v < -32768 ? -32768 : v);
    }
}

static stream opus_stream(int n_packets, int fec, int dtx) {
    stream s = {calloc((size_t)n_packets, sizeof(uint8_t *)),
                calloc((size_t)n_packets, sizeof(size_t)), 960, n_packets};
    int err;
    OpusEncoder *enc = opus_encoder_create(16000, 1, OPUS_APPLICATION_VOIP, &err);
    opus_encoder_ctl(enc, OPUS_SET_BITRATE(24000));
    opus_encoder_ctl(enc, OPUS_SET_INBAND_FEC(fec));
    opus_encoder_ctl(enc, OPUS_SET_PACKET_LOSS_PERC(fec ? 10 : 0));
    opus_encoder_ctl(enc, OPUS_SET_DTX(dtx));
    int16_t *x = malloc((size_t)n_packets * 320 * sizeof *x);
    speechlike(x, (uint32_t)n_packets * 320);
    uint8_t buf[1500];
    for (int i = 0; i < n_packets; i++) {
        int n = opus_encode(enc, x + i * 320, 320, buf, sizeof buf);
        s.len[i] = n > 0 ? (size_t)n : 0;
        s.payload[i] = malloc(s.len[i] ? s.len[i] : 1);
        memcpy(s.payload[i], buf, s.len[i]);
    }
    opus_encoder_destroy(enc);
    free(x);
    return s;
}

/* Opus through the ring is exactly libopus decoding the same packets at the leg's rate. */
static void test_codecs_opus_equals_libopus(void) {
    const uint32_t outs[] = {8000, 16000, 48000};
    stream s = opus_stream(100, 1, 0);
    for (size_t o = 0; o < 3; o++) {
        uint32_t out_rate = outs[o], spf = out_rate / 50;
        cs_jb *jb = jb_for(CS_CODEC_OPUS, 48000, 2, out_rate, 0);
        REQUIRE(jb != NULL);
        int16_t *got = calloc((size_t)(100 + 20) * spf, sizeof *got);
        size_t n = play(jb, &s, NULL, got, 20);
        CHECK(n >= 100 * spf);
        int err;
        OpusDecoder *dec = opus_decoder_create((opus_int32)out_rate, 1, &err);
        int16_t want[960];
        size_t bad = 0;
        for (int i = 0; i < 100; i++) {
            CHECK_EQ(opus_decode(dec, s.payload[i], (opus_int32)s.len[i], want, (int)spf, 0), spf);
            bad += memcmp(got + (size_t)i * spf, want, spf * sizeof *want) != 0;
        }
        CHECK_EQ(bad, 0);
        const cs_jb_stats *st = cs_jb_get_stats(jb);
        CHECK_EQ(st->concealed_samples, 0);
        CHECK_EQ(st->packets_played, 100);
        opus_decoder_destroy(dec);
        cs_jb_free(jb);
        free(got);
    }
    free_stream(&s);
}

/* One packet in 7 lost: FEC recovers audio that PLC alone conceals, and only where the
 * next packet really carried LBRR data. */
static void test_codecs_opus_fec_and_plc(void) {
    stream s = opus_stream(200, 1, 0);
    uint8_t drop[200] = {0};
    int with_lbrr = 0;
    for (int i = 10; i < 180; i += 7) { /* all played before the stream ends */
        drop[i] = 1;
        with_lbrr += cs_opus_packet_has_fec(s.payload[i + 1], s.len[i + 1]) == 1;
    }
    CHECK(with_lbrr > 5);
    uint64_t concealed[2], fec[2];
    for (int no_fec = 0; no_fec < 2; no_fec++) {
        cs_jb *jb = jb_for(CS_CODEC_OPUS, 48000, 1, 16000, no_fec ? CS_PT_NO_FEC : 0);
        REQUIRE(jb != NULL);
        int16_t *got = calloc(220 * 320, sizeof *got);
        play(jb, &s, drop, got, 0);
        concealed[no_fec] = cs_jb_get_stats(jb)->concealed_samples;
        fec[no_fec] = cs_jb_get_stats(jb)->fec_samples;
        cs_jb_free(jb);
        free(got);
    }
    CHECK_EQ(fec[0], (uint64_t)with_lbrr * 320);
    CHECK_EQ(fec[1], 0);
    CHECK_EQ(concealed[1], 25 * 320); /* 25 lost packets */
    CHECK_EQ(concealed[0] + fec[0], concealed[1]);
    /* a stream encoded without FEC carries none to recover */
    stream plain = opus_stream(40, 0, 0);
    for (int i = 0; i < 40; i++) CHECK(cs_opus_packet_has_fec(plain.payload[i], plain.len[i]) == 0);
    free_stream(&plain);
    free_stream(&s);
}

/* Opus DTX: TOC-only packets mark silence (CN), and the frames there are CNG. */
static void test_codecs_opus_dtx(void) {
    cs_jb *jb = jb_for(CS_CODEC_OPUS, 48000, 2, 8000, 0);
    REQUIRE(jb != NULL);
    stream s = opus_stream(30, 0, 0);
    uint8_t pkt[1600];
    int16_t pcm[160];
    cs_frame_info info;
    int cng = 0, concealed = 0;
    for (int i = 0; i < 60; i++) {
        int64_t t = i * 20 * MS;
        uint8_t toc = s.payload[0][0] & 0xFC; /* code 0: one frame */
        size_t n = i < 20 ? rtp(pkt, 96, (uint16_t)i, (uint32_t)i * 960, s.payload[i], s.len[i])
                          : rtp(pkt, 96, (uint16_t)i, (uint32_t)i * 960, &toc, 1);
        int r = cs_jb_insert_datagram(jb, pkt, n, t + MS);
        if (i >= 20) CHECK_EQ(r, CS_PKT_CN);
        int flag = cs_jb_pull(jb, t + 10 * MS, pcm, &info);
        cng += flag == CS_FRAME_CNG;
        concealed += flag == CS_FRAME_CONCEALED;
    }
    CHECK(cng >= 30);
    CHECK_EQ(concealed, 0);
    CHECK_EQ(cs_jb_get_stats(jb)->packets_cn, 40);
    cs_jb_free(jb);
    free_stream(&s);
}

/* Hostile payloads on an Opus payload type: malformed ones are refused, nothing reads
 * outside the packet, and the conservation of units holds. */
static void test_codecs_opus_hostile(void) {
    cs_jb *jb = jb_for(CS_CODEC_OPUS, 48000, 2, 16000, 0);
    REQUIRE(jb != NULL);
    stream s = opus_stream(20, 1, 0);
    uint32_t st = 7;
    uint8_t pkt[1600], payload[1500];
    int16_t pcm[320];
    cs_frame_info info;
    for (int i = 0; i < 3000; i++) {
        size_t len;
        if (i % 3 == 0) {
            len = s.len[i % 20];
            memcpy(payload, s.payload[i % 20], len);
        } else {
            len = 1 + cs_test_rng(&st) % 1400;
            for (size_t k = 0; k < len; k++) payload[k] = (uint8_t)cs_test_rng(&st);
        }
        uint16_t seq = (uint16_t)(i + (cs_test_rng(&st) % 5 == 0 ? cs_test_rng(&st) % 8 : 0));
        uint32_t ts = (uint32_t)i * 960 + (cs_test_rng(&st) % 9 == 0 ? cs_test_rng(&st) % 4000 : 0);
        uint8_t *copy = cs_test_exact_copy(pkt, rtp(pkt, 96, seq, ts, payload, len));
        cs_jb_insert_datagram(jb, copy, 12 + len, i * 20 * MS);
        free(copy);
        if (i % 2 == 0) cs_jb_pull(jb, i * 20 * MS + 5 * MS, pcm, &info);
        CHECK(cs_opus_packet_has_fec(payload, len) >= -1);
    }
    const cs_jb_stats *stt = cs_jb_get_stats(jb);
    CHECK(stt->packets_bad_payload > 0);
    CHECK(stt->units_played > 0);
    uint64_t out = stt->units_played + stt->units_flushed + stt->units_dropped;
    CHECK(out <= stt->units_accepted);
    CHECK(cs_opus_packet_units(NULL, 0) == -1);
    CHECK(cs_opus_packet_has_fec((const uint8_t *)"", 0) == -1);
    cs_jb_free(jb);
    free_stream(&s);
}

static const cs_test_case codec_cases[] = {
    {"g722_matches_reference", test_codecs_g722_matches_reference},
    {"g722_loss_resets", test_codecs_g722_loss_resets},
    {"l16_rates_and_orders", test_codecs_l16_rates_and_orders},
    {"reject_bad_tables", test_codecs_reject_bad_tables},
    {"opus_equals_libopus", test_codecs_opus_equals_libopus},
    {"opus_fec_and_plc", test_codecs_opus_fec_and_plc},
    {"opus_dtx", test_codecs_opus_dtx},
    {"opus_hostile", test_codecs_opus_hostile},
};
const cs_test_suite cs_suite_jb_codecs = {"jb_codecs", codec_cases, CS_TEST_COUNT(codec_cases)};
