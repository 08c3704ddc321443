"""A pure-Python reference for what the jitter buffer must decide per packet.

It re-derives, from the RFC text rather than from our C, the RFC 3550 appendix A.1
classification of sequence numbers (MAX_DROPOUT 3000, MAX_MISORDER 100, a restart
confirmed by two consecutive packets), with duplicates found by extended number.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_DROPOUT = 3000
MAX_MISORDER = 100
SEQ_MOD = 1 << 16


@dataclass
class SeqReference:
    max_seq: int | None = None
    cycles: int = 0
    bad_seq: int | None = None
    seen: set[int] = field(default_factory=set)

    def classify(self, seq: int) -> str:
        if self.max_seq is None:
            self._restart(seq)
            return "in_order"
        udelta = (seq - self.max_seq) % SEQ_MOD
        max_ext = self.cycles + self.max_seq
        if udelta == 0:
            return "duplicate"
        if udelta < MAX_DROPOUT:
            if seq < self.max_seq:
                self.cycles += SEQ_MOD
            self.max_seq = seq
            self.bad_seq = None
            self.seen.add(max_ext + udelta)
            return "in_order" if udelta == 1 else "gap"
        if udelta <= SEQ_MOD - MAX_MISORDER:
            if seq == self.bad_seq:
                self._restart(seq)
                return "restart"
            self.bad_seq = (seq + 1) % SEQ_MOD
            return "jump"
        ext = max_ext - (self.max_seq - seq) % SEQ_MOD
        if ext in self.seen:
            return "duplicate"
        self.seen.add(ext)
        return "reordered"

    def _restart(self, seq: int) -> None:
        self.max_seq = seq
        self.cycles = 0
        self.bad_seq = None
        self.seen = {seq}
