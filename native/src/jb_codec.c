/* What the jitter buffer knows of each codec: how many ring bytes a 2.5 ms unit takes,
 * the rate it decodes to, and which payload-type entries it accepts. */
#include "jb_internal.h"

int cs_jb_is_audio(uint8_t codec) {
    switch (codec) {
    case CS_CODEC_PCMU:
    case CS_CODEC_PCMA:
    case CS_CODEC_L16:
    case CS_CODEC_L16LE:
    case CS_CODEC_G722:
    case CS_CODEC_OPUS:
        return 1;
    default:
        return 0;
    }
}

uint32_t cs_jb_bytes_per_unit(const cs_pt_entry *pe) {
    /* the most a unit holds: 111 ticks at 44.1 kHz */
    uint32_t ticks = (pe->clock_rate + CS_UNITS_PER_SECOND - 1) / CS_UNITS_PER_SECOND;
    switch (pe->codec) {
    case CS_CODEC_PCMU:
    case CS_CODEC_PCMA:
    case CS_CODEC_G722: /* one octet per 8 kHz clock tick (two 16 kHz samples) */
        return ticks;
    case CS_CODEC_L16:
    case CS_CODEC_L16LE:
        return ticks * 2u * (pe->channels ? pe->channels : 1u);
    case CS_CODEC_OPUS:
        return CS_OPUS_BYTES_PER_UNIT;
    default:
        return 0;
    }
}

static int opus_rate(uint32_t rate) {
    return rate == 8000 || rate == 12000 || rate == 16000 || rate == 24000 || rate == 48000;
}

int cs_jb_check_pt(const cs_pt_entry *pe, uint32_t out_rate) {
    if (pe->pt > 127 || pe->clock_rate == 0) return -1;
    if (!cs_jb_is_audio(pe->codec))
        return pe->codec == CS_CODEC_CN || pe->codec == CS_CODEC_TELEPHONE_EVENT ? 0 : -1;
    int l16 = pe->codec == CS_CODEC_L16 || pe->codec == CS_CODEC_L16LE;
    /* 2.5 ms units of whole ticks; L16 at 44.1 kHz in groups of four (cs_jb_group) */
    if ((pe->clock_rate % CS_UNITS_PER_SECOND && !(l16 && pe->clock_rate == 44100)) ||
        (pe->clock_rate + CS_UNITS_PER_SECOND - 1) / CS_UNITS_PER_SECOND >
            CS_MAX_SAMPLES_PER_UNIT)
        return -1;
    if (pe->channels > 2) return -1;
    switch (pe->codec) {
    case CS_CODEC_PCMU:
    case CS_CODEC_PCMA:
    case CS_CODEC_G722:
        if (pe->clock_rate != 8000) return -1;
        break;
    case CS_CODEC_OPUS:
        if (pe->clock_rate != 48000 || !opus_rate(out_rate)) return -1;
        break;
    default:
        break;
    }
    uint32_t rate = cs_jb_decoded_rate(pe, out_rate);
    if (rate != out_rate && !cs_resampler_supported(rate, out_rate)) return -1;
    return 0;
}
