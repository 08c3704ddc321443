/* Private to ingest.c / ingest_streams.c: the cs_ingest layout. Not read by cffi. */
#ifndef CS_INGEST_PRIV_H
#define CS_INGEST_PRIV_H

#ifndef _GNU_SOURCE
#error "define _GNU_SOURCE before including ingest_priv.h (recvmmsg)"
#endif
#include "ingest.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/socket.h>

enum { MAX_BATCH = 64, MAX_EVENTS = 256, CMSG_BYTES = 128, MAX_SLOTS = 65535 };
#define STOP_TOKEN UINT64_MAX

/* Single-writer counters read concurrently: relaxed atomic load/store, no lock prefix. */
#define BUMP(field, k) \
    __atomic_store_n(&(field), __atomic_load_n(&(field), __ATOMIC_RELAXED) + (k), \
                     __ATOMIC_RELAXED)

typedef struct {
    pthread_mutex_t mu;      /* guards everything below */
    int active;
    uint16_t gen;            /* bumped on every add; part of the id and the epoll token */
    int fd;                  /* our dup of the caller's socket */
    cs_jb *jb;
    cs_srclock lock;
    cs_stream_counters c; /* srclock fields are filled at copy-out */
} ingest_slot;

struct cs_ingest {
    cs_ingest_config cfg;
    int epfd;
    int evfd;
    int running;
    pthread_t thread;
    pthread_mutex_t table_mu; /* add/remove/start/stop */
    ingest_slot *streams;
    /* receiver-thread buffers */
    struct mmsghdr *msgs;
    struct iovec *iovs;
    struct sockaddr_storage *addrs;
    uint8_t *bufs;
    uint8_t *cmsgs;
    struct epoll_event events[MAX_EVENTS];
    int64_t cpu_done_ns;      /* CPU of receiver threads that have exited */
    cs_ingest_counters counters;
    cs_ingest_latency latency;    /* kernel timestamp -> after insert */
    cs_ingest_latency processing; /* recvmmsg returned -> after insert */
};

/* Epoll token and stream id: generation (15 bits) << 16 | slot. */
#define STREAM_SLOT(id) ((uint32_t)(id) & 0xFFFFu)
#define STREAM_GEN(id) ((uint16_t)((uint32_t)(id) >> 16))

#endif
