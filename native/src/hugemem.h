/* Memory the receive path reads for every datagram, backed by transparent huge pages.
 *
 * With hundreds of legs each datagram lands on a different leg, and its jitter buffer,
 * ingest slot and demux entry sit on pages no other recent datagram touched: with 4 KiB
 * pages that is a TLB miss (a nested page walk on a VM) per structure per datagram. These
 * allocators put that state on 2 MiB-aligned anonymous mappings advised MADV_HUGEPAGE, so
 * the whole working set of a few thousand legs fits in a few dozen TLB entries, without
 * depending on the process environment (GLIBC_TUNABLES=glibc.malloc.hugetlb=1 did the same
 * for the malloc heap only when set). Where THP is "never" the advice is ignored and the
 * memory is ordinary pages: same behaviour, only slower.
 *
 * Under AddressSanitizer (or CALLSHIELD_NO_HUGEMEM set in the environment at the first
 * allocation) both fall back to aligned_alloc so the sanitizer still sees every block.
 * Not read by cffi.
 */
#ifndef CS_HUGEMEM_H
#define CS_HUGEMEM_H

#include <stddef.h>

/* A zeroed, 64-byte aligned (2 MiB aligned when huge) block of `bytes`; NULL on failure.
 * Its own mapping, rounded up to 2 MiB: for large, long-lived arrays (the ingest's slot
 * array, the demux table). Free with cs_huge_free and the same size. */
void *cs_huge_alloc(size_t bytes);
void cs_huge_free(void *p, size_t bytes);

/* A zeroed, 64-byte aligned block of `bytes` from a shared pool of huge-page chunks (for
 * per-stream blocks such as a jitter buffer's): blocks of one size are recycled through
 * a free list of that size, so a bridge that keeps re-creating legs of the same
 * configuration reuses the same memory. The pool never shrinks: it holds the peak of
 * live blocks of each size. Blocks over a quarter of a chunk come from aligned_alloc.
 * Thread-safe (a mutex; not for the per-datagram path). Free with cs_pool_free and the
 * same size. */
void *cs_pool_alloc(size_t bytes);
void cs_pool_free(void *p, size_t bytes);

#endif
