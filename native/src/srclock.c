/* Per-stream RTP source lock: see srclock.h for the rules. */
#include "srclock.h"

#include <string.h>

enum { DEFAULT_PROBATION = 2 };
static const int64_t DEFAULT_SSRC_QUIET_NS = 80 * 1000 * 1000;

void cs_srclock_default_config(cs_srclock_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->probation = DEFAULT_PROBATION;
    cfg->ssrc_quiet_ns = DEFAULT_SSRC_QUIET_NS;
}

void cs_srclock_init(cs_srclock *lock, const cs_srclock_config *cfg) {
    memset(lock, 0, sizeof *lock);
    if (cfg)
        lock->cfg = *cfg;
    else
        cs_srclock_default_config(&lock->cfg);
    if (lock->cfg.probation < 1)
        lock->cfg.probation = 1;
    if (lock->cfg.ssrc_quiet_ns < 0)
        lock->cfg.ssrc_quiet_ns = 0;
    lock->state = CS_SRCLOCK_LEARNING;
}

static size_t addr_len(uint8_t family) {
    return family == 4 ? 4 : family == 6 ? 16 : 0;
}

static int addr_eq(const cs_srclock_addr *a, const cs_srclock_addr *b) {
    return a->family == b->family && a->port == b->port &&
           memcmp(a->addr, b->addr, addr_len(a->family)) == 0;
}

/* Does `from` match the expected address (port 0: any port)? */
static int expected_ok(const cs_srclock *lock, const cs_srclock_addr *from) {
    const cs_srclock_addr *e = &lock->expected;
    if (e->family == 0)
        return 1;
    if (e->family != from->family || (e->port != 0 && e->port != from->port))
        return 0;
    return memcmp(e->addr, from->addr, addr_len(e->family)) == 0;
}

void cs_srclock_expect(cs_srclock *lock, const cs_srclock_addr *addr) {
    memset(&lock->expected, 0, sizeof lock->expected);
    if (addr && (addr->family == 4 || addr->family == 6)) {
        lock->expected.family = addr->family;
        lock->expected.port = addr->port;
        memcpy(lock->expected.addr, addr->addr, addr_len(addr->family));
    }
    lock->cand_count = 0;
}

/* One packet from a source that is not the locked one, while learning: RFC 3550 A.1
 * style probation, restarted by any packet that does not continue the candidate. */
static int probation_step(cs_srclock *lock, const cs_srclock_addr *from, uint32_t ssrc,
                          uint16_t seq, int64_t now_ns) {
    if (!expected_ok(lock, from)) {
        lock->counters.rejected_address++;
        return CS_SRC_DROP_ADDRESS;
    }
    if (lock->cand_count > 0 && lock->cand_ssrc == ssrc && addr_eq(&lock->cand_addr, from) &&
        seq == (uint16_t)(lock->cand_seq + 1)) {
        lock->cand_count++;
    } else {
        lock->cand_addr = *from;
        lock->cand_ssrc = ssrc;
        lock->cand_count = 1;
    }
    lock->cand_seq = seq;
    if (lock->cand_count < lock->cfg.probation) {
        lock->counters.probation_dropped++;
        return CS_SRC_DROP_PROBATION;
    }
    lock->state = CS_SRCLOCK_LOCKED;
    lock->addr = lock->cand_addr;
    lock->ssrc = ssrc;
    lock->last_ns = now_ns;
    lock->cand_count = 0;
    lock->counters.learned++;
    lock->counters.accepted++;
    return CS_SRC_ACCEPT_LEARNED;
}

int cs_srclock_check(cs_srclock *lock, const cs_srclock_addr *from, uint32_t ssrc,
                     uint16_t seq, int64_t now_ns) {
    if (lock->state == CS_SRCLOCK_LEARNING)
        return probation_step(lock, from, ssrc, seq, now_ns);

    int same_addr = addr_eq(&lock->addr, from);
    if (same_addr && ssrc == lock->ssrc) {
        lock->last_ns = now_ns;
        lock->counters.accepted++;
        return CS_SRC_ACCEPT;
    }
    if (lock->state == CS_SRCLOCK_REARMED)
        return probation_step(lock, from, ssrc, seq, now_ns);

    if (!same_addr) {
        lock->counters.rejected_address++;
        return CS_SRC_DROP_ADDRESS;
    }
    if (now_ns - lock->last_ns < lock->cfg.ssrc_quiet_ns) {
        lock->counters.rejected_ssrc++;
        return CS_SRC_DROP_SSRC;
    }
    lock->ssrc = ssrc;
    lock->last_ns = now_ns;
    lock->counters.ssrc_switches++;
    lock->counters.accepted++;
    return CS_SRC_ACCEPT_SSRC_SWITCH;
}

void cs_srclock_rearm(cs_srclock *lock, int64_t now_ns) {
    (void)now_ns; /* the old source's quiet clock keeps running from its last packet */
    if (lock->state != CS_SRCLOCK_LEARNING)
        lock->state = CS_SRCLOCK_REARMED;
    lock->cand_count = 0;
    lock->counters.rearms++;
}
